"""splash.categories with explicit loops over the blocks (np.ndindex over the heads),
each block judged with .any() and .all()."""
PUZZLE = "splash.categories"


def block_categories(mask, block_q, block_kv):
    mask = np.asarray(mask, dtype=bool)
    *heads, T, S = mask.shape
    if T % block_q or S % block_kv:
        raise ValueError(f"block_categories: block_q={block_q} must divide T={T} and "
                         f"block_kv={block_kv} S={S}")
    out = np.zeros((*heads, T // block_q, S // block_kv), np.int8)
    for head in np.ndindex(*heads):
        for i in range(T // block_q):
            for j in range(S // block_kv):
                block = mask[head][i * block_q:(i + 1) * block_q,
                                   j * block_kv:(j + 1) * block_kv]
                out[head][i, j] = 2 if block.all() else 1 if block.any() else 0
    return out
