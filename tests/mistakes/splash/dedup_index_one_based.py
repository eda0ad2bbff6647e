"""splash.dedup: block_index counts stored patterns from 1, so every partial tile
points one block past its own pattern."""
PUZZLE = "splash.dedup"
EXPECT = "block_index is off by one"


def dedup_blocks(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    categories = block_categories(mask, block_q, block_kv)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    blocks = blocks.swapaxes(-3, -2)
    index_of, stored = {}, []
    block_index = np.zeros(categories.shape, np.int32)
    for at in zip(*np.nonzero(categories == PARTIAL)):
        key = blocks[at].tobytes()
        if key not in index_of:
            stored.append(blocks[at])
            index_of[key] = len(stored)
        block_index[at] = index_of[key]
    return np.stack(stored or [np.zeros((block_q, block_kv), bool)]), block_index
