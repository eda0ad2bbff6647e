"""splash.compact: fill_ahead applied to block_mask instead of data_next."""
PUZZLE = "splash.compact"
EXPECT = "the padding entries of your block_mask are not EMPTY"


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
    return data_next, fill_ahead(block_mask, block_mask != EMPTY)
