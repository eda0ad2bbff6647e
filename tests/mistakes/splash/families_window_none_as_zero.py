"""splash.families: a window side given as None taken as 0 keys (no key on that side)
instead of no limit."""
PUZZLE = "splash.families"
EXPECT = "a side of the window given as None was taken as 0 keys"


def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    if prefix and not causal:
        raise ValueError("prefix needs causal=True")
    row, col = np.arange(T)[:, None], np.arange(S)[None, :]
    visible = np.ones((T, S), dtype=bool)
    if causal:
        visible &= (col <= row) | (col < prefix)
    if window is not None:
        left, right = (side or 0 for side in window)
        visible &= (col >= row - left) & (col <= row + right)
    if segments is not None:
        q_ids, kv_ids = (np.asarray(ids) for ids in segments)
        if q_ids.shape != (T,) or kv_ids.shape != (S,):
            raise ValueError("segment ids of the wrong length")
        visible &= q_ids[:, None] == kv_ids[None, :]
    return visible
