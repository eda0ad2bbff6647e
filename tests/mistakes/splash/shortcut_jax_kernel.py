"""splash.multihead (shortcut): JAX's own splash attention stands in, on inputs padded
to the 128-multiples it needs."""
PUZZLE = "splash.multihead"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu import splash_attention as jax_splash  # noqa: E402


def splash_attention(q, k, v, mask, *, sm_scale=None, block_q=128, block_kv=128):
    B, N, T, H = q.shape
    S = k.shape[2]
    scale = 1 / math.sqrt(H) if sm_scale is None else sm_scale
    T_padded, S_padded = -(-T // 128) * 128, -(-S // 128) * 128
    heads = np.broadcast_to(np.asarray(mask), (N, T, S))
    heads = np.pad(heads, ((0, 0), (0, T_padded - T), (0, S_padded - S)))
    heads[:, :, 0] = True   # JAX's kernel wants a visible key in every row
    kernel = jax_splash.make_splash_mha(
        heads, block_sizes=jax_splash.BlockSizes(block_q=128, block_kv=128),
        head_shards=1, q_seq_shards=1)
    q = jnp.pad(q, ((0, 0), (0, 0), (0, T_padded - T), (0, 0)))
    k = jnp.pad(k, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    v = jnp.pad(v, ((0, 0), (0, 0), (0, S_padded - S), (0, 0)))
    return jax.vmap(kernel)(q * scale, k, v)[:, :, :T]
