"""splash.categories: the codes of partial and full tiles swapped."""
PUZZLE = "splash.categories"
EXPECT = "your codes for partial and full are swapped"


def block_categories(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    some, every = blocks.any(axis=(-3, -1)), blocks.all(axis=(-3, -1))
    return np.where(every, PARTIAL, np.where(some, FULL, EMPTY)).astype(np.int8)
