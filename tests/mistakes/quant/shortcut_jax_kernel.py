"""quant.weight_only (shortcut): JAX's own Pallas matmul on the dequantised weights."""
PUZZLE = "quant.weight_only"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.tpu import matmul as jax_matmul  # noqa: E402


def int8_weight_matmul(x, w_q, w_scale, *, bm=128, bk=128, bn=128):
    w = w_q.astype(jnp.float32) * w_scale
    return jax_matmul.matmul(x.astype(jnp.float32), w, block_shape=(bm, bn),
                             block_k=bk).astype(x.dtype)
