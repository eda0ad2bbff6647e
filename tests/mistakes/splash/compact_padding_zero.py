"""splash.compact: the padding steps left at kv block 0."""
PUZZLE = "splash.compact"
EXPECT = "the padding steps name kv block 0"


def compact(categories):
    categories = np.asarray(categories)
    *tables, num_q, num_kv = categories.shape
    width = max(1, int((categories != EMPTY).sum(axis=-1).max(initial=0)))
    data_next = np.zeros((*tables, num_q, width), np.int32)
    block_mask = np.zeros((*tables, num_q, width), np.int32)
    for row in np.ndindex(*tables, num_q):
        kv_blocks = np.flatnonzero(categories[row] != EMPTY)
        data_next[row][:kv_blocks.size] = kv_blocks
        block_mask[row][:kv_blocks.size] = categories[row][kv_blocks]
    return data_next, block_mask
