"""norms.fused_xent: w's index map returns (0, t): token block t reads vocabulary block t
at every step, and the other vocabulary blocks never reach the kernel."""
PUZZLE = "norms.fused_xent"
EXPECT = "some vocabulary blocks of w never reach your kernel"


def cross_entropy_forward(h, w, labels, *, block_t=128, block_v=512):
    (T, D), V = h.shape, w.shape[1]
    per_token = pl.BlockSpec((block_t, 1), lambda t, v: (t, 0))
    loss, lse = pl.pallas_call(
        functools.partial(cross_entropy_forward_kernel, V=V),
        out_shape=[jax.ShapeDtypeStruct((T, 1), jnp.float32),
                   jax.ShapeDtypeStruct((T, 1), jnp.float32)],
        grid=(pl.cdiv(T, block_t), pl.cdiv(V, block_v)),
        in_specs=[pl.BlockSpec((block_t, D), lambda t, v: (t, 0)),
                  pl.BlockSpec((D, block_v), lambda t, v: (0, t)),
                  per_token],
        out_specs=[per_token, per_token],
        scratch_shapes=[pltpu.VMEM((block_t, 1), jnp.float32)] * 3,
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(h, w, labels.reshape(T, 1))
    return loss.reshape(T), lse
