"""splash.compact: the width counted along the q axis (the most visits of one kv block)."""
PUZZLE = "splash.compact"
EXPECT = "the most non-empty tiles in any one row"


def compact(categories):
    categories = np.asarray(categories)
    *tables, num_q, num_kv = categories.shape
    visit = categories != EMPTY
    width = max(1, int(visit.sum(axis=-2).max(initial=0)))
    data_next = np.zeros((*tables, num_q, width), np.int32)
    block_mask = np.zeros((*tables, num_q, width), np.int32)
    for row in np.ndindex(*tables, num_q):
        kv_blocks = np.flatnonzero(visit[row])
        data_next[row][:kv_blocks.size] = kv_blocks
        block_mask[row][:kv_blocks.size] = categories[row][kv_blocks]
    return fill_ahead(data_next, block_mask != EMPTY), block_mask
