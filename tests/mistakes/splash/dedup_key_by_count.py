"""splash.dedup: a pattern keyed by its count of visible keys, so different patterns collide."""
PUZZLE = "splash.dedup"
EXPECT = "two different partial patterns share one stored block"


def dedup_blocks(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    categories = block_categories(mask, block_q, block_kv)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    blocks = blocks.swapaxes(-3, -2)
    index_of, stored = {}, []
    block_index = np.zeros(categories.shape, np.int32)
    for at in zip(*np.nonzero(categories == PARTIAL)):
        key = int(blocks[at].sum())
        if key not in index_of:
            index_of[key] = len(stored)
            stored.append(blocks[at])
        block_index[at] = index_of[key]
    if not stored:
        stored.append(np.zeros((block_q, block_kv), dtype=bool))
    return np.stack(stored), block_index
