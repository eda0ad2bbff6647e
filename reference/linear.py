"""Linear attention, gating and the chunked delta rule — reference solutions.

Same functions and signatures as exercises/linear.py. Learners see these
through `pytest --hint=3`, so they are written as code worth copying.

The public API, at the end: `linear_attention`, `gated_linear_attention`,
`delta_rule` and `gated_delta_rule`, for q, k [B, N, T, H] and v [B, N, T, Hv]
of any T, float32 or bfloat16 in (the state and the statistics in float32,
the input dtype out). One chunk of C tokens per grid step along a sequential
chunk axis; the [H, Hv] state lives in VMEM scratch from chunk to chunk.
"""

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu


# 1. linear.recurrent — the recurrent form in plain JAX ----------------------

def recurrent(q, k, v, log_decay=None, beta=None):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    f32 = jnp.float32
    if log_decay is None:   # no gating: g_t = exp(0) = 1
        log_decay = jnp.zeros((B, N, T), f32)

    def step(state, token):
        q_t, k_t, v_t, a_t, beta_t = token           # [B, N, H], ..., [B, N] per step
        state = jnp.exp(a_t)[..., None, None] * state    # g_t S_{t-1}
        if beta is None:
            write = v_t
        else:   # the delta rule writes beta_t times what the decayed state got wrong
            write = beta_t[..., None] * (v_t - jnp.einsum("bnh,bnhv->bnv", k_t, state))
        state = state + k_t[..., :, None] * write[..., None, :]   # + k_t^T write
        return state, jnp.einsum("bnh,bnhv->bnv", q_t, state)     # o_t = q_t S_t

    def time_major(x):
        return None if x is None else jnp.moveaxis(x.astype(f32), 2, 0)

    tokens = tuple(time_major(x) for x in (q, k, v, log_decay, beta))
    _, o = jax.lax.scan(step, jnp.zeros((B, N, H, Hv), f32), tokens)
    return jnp.moveaxis(o, 0, 2).astype(q.dtype)


# 2. linear.intra — one chunk as matmuls ---------------------------------------

def intra_chunk_kernel(q_ref, k_ref, v_ref, o_ref):
    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)   # query i
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)   # key j
    scores = jnp.where(col <= row, scores, 0.0)      # query i sees keys j <= i
    o = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    o_ref[...] = o.astype(o_ref.dtype)


def intra_chunk(q, k, v, *, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    if T % chunk:
        raise ValueError(f"intra_chunk: T={T} must be a multiple of chunk={chunk}")

    def chunk_block(b, n, c):
        return (b, n, c, 0)

    return pl.pallas_call(
        intra_chunk_kernel,
        out_shape=jax.ShapeDtypeStruct((B, N, T, Hv), q.dtype),
        grid=(B, N, T // chunk),
        in_specs=[pl.BlockSpec((None, None, chunk, H), chunk_block),
                  pl.BlockSpec((None, None, chunk, H), chunk_block),
                  pl.BlockSpec((None, None, chunk, Hv), chunk_block)],
        out_specs=pl.BlockSpec((None, None, chunk, Hv), chunk_block),
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "parallel")),
    )(q, k, v)


# 3. linear.chunked — the state carried across a sequential chunk axis ---------

def linear_kernel(q_ref, k_ref, v_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]                              # S before this chunk, float32
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    row = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 0)   # query i
    col = jax.lax.broadcasted_iota(jnp.int32, scores.shape, 1)   # key j
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    # The state is read in float32 (q cast up, never S cast down): its low bits are what
    # the latest chunks added.
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    # Only now the chunk joins the state: S + K^T V, for the chunks after this one.
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, v, preferred_element_type=jnp.float32)


def chunked_call(q, k, v, *per_token, kernel, chunk=64):
    B, N, T, H = q.shape
    Hv = v.shape[-1]
    if T % chunk:
        raise ValueError(f"chunked_call: T={T} must be a multiple of chunk={chunk}")
    # A per-token scalar travels as a [B, N, T, 1] column: (chunk, 1) blocks obey
    # the TPU's (8, 128) rule because their last dim is the array's.
    per_token = [x.reshape(B, N, T, 1) for x in per_token]

    def chunk_block(b, n, c):
        return (b, n, c, 0)

    def rows_of(width):
        return pl.BlockSpec((None, None, chunk, width), chunk_block)

    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((B, N, T, Hv), q.dtype),
        grid=(B, N, T // chunk),
        in_specs=[rows_of(H), rows_of(H), rows_of(Hv)] + [rows_of(1)] * len(per_token),
        out_specs=rows_of(Hv),
        scratch_shapes=[pltpu.VMEM((H, Hv), jnp.float32)],    # S, for the whole sequence
        compiler_params=pltpu.CompilerParams(
            # b and n are independent; the chunks of one sequence run in order.
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(q, k, v, *per_token)


# 4. linear.gating — decay inside a chunk, in log space ------------------------

def decay_factors(log_decay):
    """(within (C, C), since_start (C, 1), until_end (C, 1), across (1, 1)) for one chunk's
    log decays (C, 1): every decay a chunk needs, from b_i = log_decay_0 + ... + log_decay_i."""
    C = log_decay.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, (C, C), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (C, C), 1)
    # No cumsum on a TPU: a masked sum over a triangle. Column j of the (C, C) grid keeps
    # log_decay_s for s <= j, and summing down the rows gives b as a (1, C) row; the
    # diagonal of that row, summed across, gives the same b as a (C, 1) column.
    b_row = jnp.sum(jnp.where(row <= col, log_decay, 0.0), axis=0, keepdims=True)
    b = jnp.sum(jnp.where(row == col, b_row, 0.0), axis=1, keepdims=True)
    total = jnp.sum(log_decay, axis=0, keepdims=True)            # b of the chunk's last token
    # exp(b_i - b_j) as one exp of a masked exponent, never exp(b_i) * exp(-b_j): in a
    # long chunk with strong decay exp(b_i) underflows to 0 and exp(-b_j) overflows.
    within = jnp.exp(jnp.where(col <= row, b - b_row, -jnp.inf))
    return within, jnp.exp(b), jnp.exp(total - b), jnp.exp(total)


def gated_kernel(q_ref, k_ref, v_ref, log_decay_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    within, since_start, until_end, across = decay_factors(
        log_decay_ref[...].astype(jnp.float32))
    # The decay mask is also the causal mask: within is 0 above the diagonal.
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32) * within
    from_chunk = jnp.dot(scores.astype(v.dtype), v, preferred_element_type=jnp.float32)
    from_state = since_start * jnp.dot(q.astype(jnp.float32), state,
                                       preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    k_to_end = (k * until_end).astype(k.dtype)       # token j's write, decayed to the end
    state_ref[...] = across * state + jnp.einsum("ih,iv->hv", k_to_end, v,
                                                 preferred_element_type=jnp.float32)


# 5. linear.delta_rule — the triangular system inside a chunk -----------------------

def forward_substitution(lower, rhs):
    """u (C, W) with (I + lower) u = rhs, for a strictly lower-triangular lower (C, C):
    row i of u is rhs_i - lower_i @ u, once rows 0 .. i - 1 of u are final."""
    C = lower.shape[0]
    row = jax.lax.broadcasted_iota(jnp.int32, lower.shape, 0)
    rows = jax.lax.broadcasted_iota(jnp.int32, (C, 1), 0)

    def solve_row(i, u):
        lower_i = jnp.sum(jnp.where(row == i, lower, 0.0), axis=0, keepdims=True)  # (1, C)
        solved = u - jnp.dot(lower_i, u, preferred_element_type=jnp.float32)
        return jnp.where(rows == i, solved, u)           # only row i changes

    return jax.lax.fori_loop(0, C, solve_row, rhs)


def delta_kernel(q_ref, k_ref, v_ref, beta_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    beta = beta_ref[...].astype(jnp.float32)                     # (C, 1)
    row = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], q.shape[0]), 0)
    col = jax.lax.broadcasted_iota(jnp.int32, (q.shape[0], q.shape[0]), 1)
    # Row i writes u_i = beta_i (v_i - k_i S_{i-1}), and S_{i-1} = S + sum_{j<i} k_j^T u_j:
    #     (I + L) u = beta (V - K S),    L_ij = beta_i k_i . k_j  for j < i.
    keys = jnp.einsum("ih,jh->ij", k, k, preferred_element_type=jnp.float32)
    lower = jnp.where(col < row, beta * keys, 0.0)
    predicted = jnp.dot(k.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    u = forward_substitution(lower, beta * (v.astype(jnp.float32) - predicted))
    # From here on, linear attention with the values u.
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32)
    scores = jnp.where(col <= row, scores, 0.0)
    from_chunk = jnp.dot(scores.astype(v.dtype), u.astype(v.dtype),
                         preferred_element_type=jnp.float32)
    from_state = jnp.dot(q.astype(jnp.float32), state, preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    state_ref[...] = state + jnp.einsum("ih,iv->hv", k, u.astype(k.dtype),
                                        preferred_element_type=jnp.float32)


# 6. linear.gated_delta — the delta rule with the decay of puzzle 4 -----------------

def gated_delta_kernel(q_ref, k_ref, v_ref, beta_ref, log_decay_ref, o_ref, state_ref):
    @pl.when(pl.program_id(2) == 0)
    def start_sequence():
        state_ref[...] = jnp.zeros_like(state_ref)

    q, k, v = q_ref[...], k_ref[...], v_ref[...]
    state = state_ref[...]
    beta = beta_ref[...].astype(jnp.float32)
    within, since_start, until_end, across = decay_factors(
        log_decay_ref[...].astype(jnp.float32))
    # Row i erases from the state as it is at step i: S decayed by exp(b_i), and every
    # earlier write u_j decayed by exp(b_i - b_j). Strictly below the diagonal: j < i.
    row = jax.lax.broadcasted_iota(jnp.int32, within.shape, 0)
    col = jax.lax.broadcasted_iota(jnp.int32, within.shape, 1)
    keys = jnp.einsum("ih,jh->ij", k, k, preferred_element_type=jnp.float32)
    lower = jnp.where(col < row, beta * keys * within, 0.0)
    predicted = since_start * jnp.dot(k.astype(jnp.float32), state,
                                      preferred_element_type=jnp.float32)
    u = forward_substitution(lower, beta * (v.astype(jnp.float32) - predicted))
    # From here on, gated linear attention with the values u.
    scores = jnp.einsum("ih,jh->ij", q, k, preferred_element_type=jnp.float32) * within
    from_chunk = jnp.dot(scores.astype(v.dtype), u.astype(v.dtype),
                         preferred_element_type=jnp.float32)
    from_state = since_start * jnp.dot(q.astype(jnp.float32), state,
                                       preferred_element_type=jnp.float32)
    o_ref[...] = (from_chunk + from_state).astype(o_ref.dtype)
    k_to_end = (k * until_end).astype(k.dtype)
    state_ref[...] = across * state + jnp.einsum("ih,iv->hv", k_to_end, u.astype(k.dtype),
                                                 preferred_element_type=jnp.float32)


# 7. linear.api — any T, validated arguments, the four public functions ----------

def chunked_attention(q, k, v, *, log_decay=None, beta=None, chunk=64):
    """The four recurrences as one chunked kernel each: log_decay [B, N, T] (<= 0) turns
    on gating, beta [B, N, T] (in [0, 1]) the delta rule. Any T >= 1."""
    if q.ndim != 4:
        raise ValueError(f"linear attention: q must be [B, N, T, H]; got shape {q.shape}")
    if k.shape != q.shape:
        raise ValueError(f"linear attention: k must have q's shape {q.shape}; got {k.shape}")
    if v.ndim != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"linear attention: v must be [B, N, T, Hv] with q's B, N, T "
                         f"{q.shape[:3]}; got {v.shape}")
    for name, x in (("log_decay", log_decay), ("beta", beta)):
        if x is not None and x.shape != q.shape[:3]:
            raise ValueError(f"linear attention: {name} must be [B, N, T] = {q.shape[:3]}; "
                             f"got {x.shape}")
    if not (q.dtype == k.dtype == v.dtype) or not jnp.issubdtype(q.dtype, jnp.floating):
        raise ValueError(f"linear attention: q, k and v must share one floating dtype; "
                         f"got {q.dtype}, {k.dtype}, {v.dtype}")
    if not isinstance(chunk, int) or chunk <= 0 or chunk % 8:
        raise ValueError(f"linear attention: chunk={chunk!r} must be a positive multiple "
                         "of 8 (the TPU's sublane count)")
    T = q.shape[2]
    if T < 1:
        raise ValueError("linear attention: T must be at least 1")

    # Whole chunks only: a chunk longer than the sequence shrinks to it (rounded up to
    # 8 rows), and T is padded with zeros. Padding comes after every real token, and
    # nothing flows backwards in time: the real outputs never see it.
    chunk = min(chunk, -(-T // 8) * 8)
    padding = -T % chunk
    q, k, v = (jnp.pad(x, ((0, 0), (0, 0), (0, padding), (0, 0))) for x in (q, k, v))
    per_token = [jnp.pad(x, ((0, 0), (0, 0), (0, padding)))
                 for x in (beta, log_decay) if x is not None]
    kernel = {(False, False): linear_kernel, (True, False): gated_kernel,
              (False, True): delta_kernel,
              (True, True): gated_delta_kernel}[(log_decay is not None, beta is not None)]
    return chunked_call(q, k, v, *per_token, kernel=kernel, chunk=chunk)[:, :, :T]


def linear_attention(q, k, v, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with S_t = S_{t-1} + k_t^T v_t."""
    return chunked_attention(q, k, v, chunk=chunk)


def gated_linear_attention(q, k, v, log_decay, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with S_t = exp(log_decay_t) S_{t-1} + k_t^T v_t."""
    return chunked_attention(q, k, v, log_decay=log_decay, chunk=chunk)


def delta_rule(q, k, v, beta, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1})."""
    return chunked_attention(q, k, v, beta=beta, chunk=chunk)


def gated_delta_rule(q, k, v, beta, log_decay, *, chunk=64):
    """PROVIDED: o_t = q_t S_t with
    S_t = g_t S_{t-1} + beta_t k_t^T (v_t - g_t k_t S_{t-1}), g_t = exp(log_decay_t)."""
    return chunked_attention(q, k, v, log_decay=log_decay, beta=beta, chunk=chunk)
