"""splash.families: the window's right bound is exclusive, col < row + R."""
PUZZLE = "splash.families"
EXPECT = "one key too narrow on its right"
AVOID = "index map"

def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    if prefix and not causal:
        raise ValueError("prefix widens a causal mask; pass causal=True")
    row = np.arange(T)[:, None]
    col = np.arange(S)[None, :]
    visible = np.ones((T, S), dtype=bool)
    if causal:
        visible &= (col <= row) | (col < prefix)
    if window is not None:
        left, right = window
        if left is not None:
            visible &= col >= row - left
        if right is not None:
            visible &= col < row + right
    if segments is not None:
        q_segments, kv_segments = (np.asarray(ids) for ids in segments)
        if q_segments.shape != (T,) or kv_segments.shape != (S,):
            raise ValueError("segments")
        visible &= q_segments[:, None] == kv_segments[None, :]
    return visible

