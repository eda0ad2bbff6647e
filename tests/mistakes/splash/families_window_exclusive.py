"""splash.families: the window's ends excluded (< instead of <=)."""
PUZZLE = "splash.families"
EXPECT = "your window is one key too narrow"


def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    row, col = np.arange(T)[:, None], np.arange(S)[None, :]
    visible = np.ones((T, S), dtype=bool)
    if causal:
        visible &= (col <= row) | (col < prefix)
    if window is not None:
        left, right = window
        if left is not None:
            visible &= col > row - left
        if right is not None:
            visible &= col < row + right
    if segments is not None:
        visible &= np.asarray(segments[0])[:, None] == np.asarray(segments[1])[None, :]
    return visible
