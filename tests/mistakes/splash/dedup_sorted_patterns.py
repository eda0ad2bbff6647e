"""splash.dedup: the distinct patterns found with np.unique(axis=0), which sorts them,
not in the order they first appear."""
PUZZLE = "splash.dedup"
EXPECT = "your patterns are in sorted order"


def dedup_blocks(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    categories = block_categories(mask, block_q, block_kv)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    blocks = blocks.swapaxes(-3, -2)
    partial = categories == PARTIAL
    block_index = np.zeros(categories.shape, np.int32)
    if not partial.any():
        return np.zeros((1, block_q, block_kv), bool), block_index
    unique, inverse = np.unique(blocks[partial], axis=0, return_inverse=True)
    block_index[partial] = inverse.reshape(-1)
    return unique, block_index
