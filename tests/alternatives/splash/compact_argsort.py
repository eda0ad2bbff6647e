"""splash.compact with each row's visited blocks found by a stable argsort (visited
first, in order) instead of flatnonzero, and the padding filled by the provided
fill_ahead."""
PUZZLE = "splash.compact"


def compact(categories):
    categories = np.asarray(categories)
    visit = categories != 0
    width = max(1, int(visit.sum(axis=-1).max(initial=0)))
    order = np.argsort(~visit, axis=-1, kind="stable")[..., :width]
    kept = np.take_along_axis(visit, order, axis=-1)
    data_next = np.where(kept, order, 0).astype(np.int32)
    block_mask = np.where(kept, np.take_along_axis(categories, order, axis=-1), 0).astype(
        np.int32)
    return fill_ahead(data_next, block_mask != 0), block_mask
