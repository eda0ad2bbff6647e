"""splash.multihead: compact without max(1, ...): a mask with every key hidden gives tables of width 0 (a grid axis of no step)."""
PUZZLE = "splash.multihead"
EXPECT = "a mask with every key hidden still gets one step"


def compact(categories):
    categories = np.asarray(categories)
    *tables, num_q, num_kv = categories.shape
    visit = categories != EMPTY
    width = int(visit.sum(axis=-1).max(initial=0))   # the longest list
    data_next = np.zeros((*tables, num_q, width), np.int32)
    block_mask = np.zeros((*tables, num_q, width), np.int32)
    for row in np.ndindex(*tables, num_q):
        kv_blocks = np.flatnonzero(visit[row])       # the blocks this q block visits
        data_next[row][:kv_blocks.size] = kv_blocks
        block_mask[row][:kv_blocks.size] = categories[row][kv_blocks]
    # Padding steps (block_mask 0) name the block the next visit needs: no new fetch.
    return fill_ahead(data_next, block_mask != EMPTY), block_mask
