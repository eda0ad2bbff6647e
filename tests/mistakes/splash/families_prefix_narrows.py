"""splash.families: the prefix ANDed with the causal rule, so it hides keys instead of
showing the prompt to every query."""
PUZZLE = "splash.families"
EXPECT = "narrows the causal mask instead of widening it"


def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    row, col = np.arange(T)[:, None], np.arange(S)[None, :]
    visible = np.ones((T, S), dtype=bool)
    if causal:
        visible &= col <= row
    if prefix:
        visible &= col < prefix
    if window is not None:
        left, right = window
        if left is not None:
            visible &= col >= row - left
        if right is not None:
            visible &= col <= row + right
    if segments is not None:
        visible &= np.asarray(segments[0])[:, None] == np.asarray(segments[1])[None, :]
    return visible
