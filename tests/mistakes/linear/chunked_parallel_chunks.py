"""linear.chunked: every grid axis "parallel", the chunk axis that carries the state too."""
PUZZLE = "linear.chunked"
EXPECT = "the chunk axis carries the state from one chunk to the next"


def chunked_call(q, k, v, *per_token, kernel, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    per_token = [x.reshape(B, N, T, 1) for x in per_token]

    def rows_of(width):
        return pl.BlockSpec((None, None, chunk, width), lambda b, n, c: (b, n, c, 0))

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B, N, T, Hv), q.dtype),
        grid=(B, N, T // chunk),
        in_specs=[rows_of(H), rows_of(H), rows_of(Hv)] + [rows_of(1)] * len(per_token),
        out_specs=rows_of(Hv),
        scratch_shapes=[pltpu.VMEM((H, Hv), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")),
    )(q, k, v, *per_token)
