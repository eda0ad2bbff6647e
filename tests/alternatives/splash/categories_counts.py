"""splash.categories from the count of visible keys per block: 0 visible is empty, all
of them full, anything else partial; the block view by a transpose to
[..., q blocks, kv blocks, block_q, block_kv]."""
PUZZLE = "splash.categories"


def block_categories(mask, block_q, block_kv):
    mask = np.asarray(mask).astype(bool)
    *heads, T, S = mask.shape
    if T % block_q or S % block_kv:
        raise ValueError(f"block_categories: block_q={block_q} must divide T={T} and "
                         f"block_kv={block_kv} S={S}")
    n = len(heads)
    blocks = mask.reshape(*heads, T // block_q, block_q, S // block_kv, block_kv)
    blocks = blocks.transpose(*range(n), n, n + 2, n + 1, n + 3)
    visible = blocks.sum(axis=(-2, -1))
    return np.where(visible == 0, 0, np.where(visible == block_q * block_kv, 2, 1)).astype(
        np.int8)
