"""splash.categories: a reshape straight to [T/block_q, S/block_kv, block_q, block_kv],
which keeps memory order and so does not cut the mask into tiles."""
PUZZLE = "splash.categories"
EXPECT = "keeps memory order"


def block_categories(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, S // block_kv, block_q, block_kv)
    some, every = blocks.any(axis=(-2, -1)), blocks.all(axis=(-2, -1))
    return (some.astype(np.int8) + every.astype(np.int8)).astype(np.int8)
