"""splash.dedup: the tiles taken from the reshape without swapaxes(-3, -2)."""
PUZZLE = "splash.dedup"
EXPECT = "one row of the mask cut into its kv blocks"


def dedup_blocks(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    categories = block_categories(mask, block_q, block_kv)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    index_of, stored = {}, []
    block_index = np.zeros(categories.shape, np.int32)
    for at in zip(*np.nonzero(categories == PARTIAL)):
        key = blocks[at].tobytes()
        if key not in index_of:
            index_of[key] = len(stored)
            stored.append(blocks[at])
        block_index[at] = index_of[key]
    if not stored:
        stored.append(np.zeros((block_q, block_kv), dtype=bool))
    return np.stack(stored), block_index
