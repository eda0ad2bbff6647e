"""splash.dedup: every partial tile stored, duplicates included."""
PUZZLE = "splash.dedup"
EXPECT = "every partial tile got its own stored block"


def dedup_blocks(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    categories = block_categories(mask, block_q, block_kv)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    blocks = blocks.swapaxes(-3, -2)
    stored, block_index = [], np.zeros(categories.shape, np.int32)
    for at in zip(*np.nonzero(categories == PARTIAL)):
        block_index[at] = len(stored)
        stored.append(blocks[at])
    return np.stack(stored or [np.zeros((block_q, block_kv), bool)]), block_index
