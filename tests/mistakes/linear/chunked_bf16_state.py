"""linear.chunked: the state scratch takes the inputs' dtype, bf16 for bf16 inputs."""
PUZZLE = "linear.chunked"
EXPECT = "keep it in a float32 scratch, pltpu.VMEM((H, Hv), jnp.float32), whatever the inputs' dtype"


def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...].astype(jnp.float32)
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    update = jnp.einsum("ih,iv->hv", k, v, preferred_element_type=jnp.float32)
    state_ref[...] = (state + update).astype(state_ref.dtype)


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
        scratch_shapes=[pltpu.VMEM((H, Hv), q.dtype)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q, k, v, *per_token)
