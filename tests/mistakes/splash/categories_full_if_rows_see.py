"""splash.categories: a tile called full when each of its rows sees some key (any over
the keys, then all over the rows), not when every key is visible."""
PUZZLE = "splash.categories"
EXPECT = "a tile where every query row sees some key is not full yet"


def block_categories(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    *heads, T, S = mask.shape
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    some = blocks.any(axis=(-3, -1))
    every = blocks.any(axis=-1).all(axis=-2)
    return some.astype(np.int8) + every.astype(np.int8)
