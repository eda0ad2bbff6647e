"""linear.intra (shortcut): JAX's own Pallas matmul does the two products of each chunk."""
PUZZLE = "linear.intra"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu import matmul as jax_matmul  # noqa: E402


def intra_chunk(q, k, v, *, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]

    def one_chunk(q, k, v):   # [C, H], [C, H], [C, Hv]: zero-pad to the kernel's tiles
        C = q.shape[0]
        qp = jnp.pad(q, ((0, 128 - C), (0, 128 - H)))
        kp = jnp.pad(k, ((0, 128 - C), (0, 128 - H)))
        scores = jax_matmul.matmul(qp, kp.T, block_shape=(128, 128), block_k=128)[:C, :C]
        scores = jnp.tril(scores)
        sp = jnp.pad(scores, ((0, 128 - C), (0, 128 - C)))
        vp = jnp.pad(v, ((0, 128 - C), (0, 128 - Hv)))
        return jax_matmul.matmul(sp, vp, block_shape=(128, 128), block_k=128)[:C, :Hv]

    chunks = [one_chunk(q[b, n, c:c + chunk], k[b, n, c:c + chunk], v[b, n, c:c + chunk])
              for b in range(B) for n in range(N) for c in range(0, T, chunk)]
    return jnp.stack(chunks).reshape(B, N, T, Hv).astype(q.dtype)
