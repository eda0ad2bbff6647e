"""splash.compact: the two tables returned in the wrong order."""
PUZZLE = "splash.compact"
EXPECT = "compact returns the two tables in the order (data_next, block_mask)"


def compact(categories):
    categories = np.asarray(categories)
    *tables, num_q, num_kv = categories.shape
    visit = categories != EMPTY
    width = max(1, int(visit.sum(axis=-1).max(initial=0)))
    data_next = np.zeros((*tables, num_q, width), np.int32)
    block_mask = np.zeros((*tables, num_q, width), np.int32)
    for row in np.ndindex(*tables, num_q):
        kv_blocks = np.flatnonzero(visit[row])
        data_next[row][:kv_blocks.size] = kv_blocks
        block_mask[row][:kv_blocks.size] = categories[row][kv_blocks]
    return block_mask, fill_ahead(data_next, block_mask != EMPTY)
