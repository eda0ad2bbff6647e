"""norms.rms_forward (shortcut): JAX's own Pallas RMSNorm (the GPU one) stands in."""
PUZZLE = "norms.rms_forward"
EXPECT = "is not yours"

from jax.experimental.pallas.ops.gpu import rms_norm as jax_rms_norm  # noqa: E402


def rms_norm_forward(x, scale, *, eps=1e-6, block_rows=8):
    y, (_, _, _, rstd) = jax_rms_norm.rms_norm_forward(
        x[None], scale, jnp.zeros_like(scale), eps=eps)
    return y[0], rstd.reshape(-1, 1).astype(jnp.float32)
