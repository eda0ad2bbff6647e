"""splash.compact: a stable argsort puts the visited kv blocks first, and the padding
keeps the empty blocks' own indices (blocks nobody needs, fetched for nothing)."""
PUZZLE = "splash.compact"
EXPECT = "its padding entries (where block_mask is EMPTY) are not"


def compact(categories):
    categories = np.asarray(categories)
    width = max(1, int((categories != EMPTY).sum(axis=-1).max(initial=0)))
    order = np.argsort(categories == EMPTY, axis=-1, kind="stable")[..., :width]
    block_mask = np.take_along_axis(categories, order, axis=-1).astype(np.int32)
    return order.astype(np.int32), block_mask
