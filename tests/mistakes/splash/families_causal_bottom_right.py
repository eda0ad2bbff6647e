"""splash.families: causal aligned bottom-right (s <= t + S - T), as some libraries do
when T != S, instead of from position 0 (s <= t)."""
PUZZLE = "splash.families"
EXPECT = "your causal rule is aligned bottom-right"


def make_mask(T, S, *, causal=False, window=None, prefix=0, segments=None):
    if prefix and not causal:
        raise ValueError("prefix needs causal=True")
    row, col = np.arange(T)[:, None], np.arange(S)[None, :]
    visible = np.ones((T, S), dtype=bool)
    if causal:
        visible &= (col <= row + S - T) | (col < prefix)
    if window is not None:
        left, right = window
        if left is not None:
            visible &= col >= row - left
        if right is not None:
            visible &= col <= row + right
    if segments is not None:
        q_ids, kv_ids = (np.asarray(ids) for ids in segments)
        if q_ids.shape != (T,) or kv_ids.shape != (S,):
            raise ValueError("segment ids of the wrong length")
        visible &= q_ids[:, None] == kv_ids[None, :]
    return visible
