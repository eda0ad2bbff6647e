"""The linear chapter's lesson machinery: what exercises/test_linear.py knows about
linear attention's recurrences beyond the right answers.

* The recurrence, token by token in float64 NumPy (``recurrence``: the right answer
  every test compares with), and the kernels' chunk-by-chunk form (``chunkwise``),
  each with flags that make the chapter's known near-misses; the ``*_likely``
  functions (and ``expected_and_wrong``) hand those to ``check(..., likely=...)``.
* Budgets: the dot flops of the chunked kernels (``chunk_flops``, ``intra_flops``,
  ``api_flops``) and of the O(T^2) way (``quadratic_flops``), a chunked kernel's VMEM
  (``chunked_vmem``), each input read once (``check_moves_once``).
* Checks that word a learner's sentence: the chunk axis in order
  (``check_chunks_in_order``), the chunk rounded to whole tiles
  (``check_chunk_rounded``), decay_factors' outputs (``check_factors``,
  ``check_within_masked``), a bad argument named (``check_names_bad_argument``).
* Three checks read from a kernel's jaxpr by a small forward label propagation
  (``_labelled``, through ``jaxcompat``): no exp of an unbounded exponent times a 0/1
  mask (``check_decay_masked``), no matmul reading the state rounded to bf16
  (``check_state_read_in_float32``), the state zeroed under pl.when only
  (``check_state_reset_once``). They walk the jaxpr themselves, moved here as the test
  file had them; they read programs through jaxcompat's view of control flow.
"""
import functools

import jax
import jax.numpy as jnp

from .. import jaxcompat
from ..checking import Mismatch, _narrow_floats, check, check_traffic, fail, raised
from ..diagnose import Finding, close
from ..frozen import np


# --- the recurrence in float64 NumPy, and its known near-misses ------------------

def recurrence(q, k, v, log_decay=None, beta=None, *, read_first=False,
               decay_after_write=False, erase_undecayed=False, beta_on_keys=False,
               beta_on_values=False, decay_not_exp=False):
    """o [B, N, T, Hv] in float64, one token at a time:
        S_t = g_t S_{t-1} + k_t^T w_t,   o_t = q_t S_t,   g_t = exp(log_decay_t),
        w_t = v_t (no beta) or beta_t (v_t - g_t k_t S_{t-1}) (the delta rule).
    The flags make known wrong recurrences: o_t read before the update; the decay
    applied after the write; the erase reading the undecayed state; beta on k only;
    beta on v only (beta_t v_t - k_t S); the log decay itself as the factor (no exp)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, N, T, H = q.shape
    S = np.zeros((B, N, H, v.shape[-1]))
    o = np.zeros(v.shape)
    for t in range(T):
        a = None if log_decay is None else np.float64(log_decay[:, :, t])[..., None, None]
        g = 1.0 if a is None else a if decay_not_exp else np.exp(a)
        if not decay_after_write:
            S_read = S if erase_undecayed else g * S
            S = g * S
        else:
            S_read = S
        w = v[:, :, t]
        if beta is not None:
            b = np.asarray(beta[:, :, t], np.float64)[..., None]
            erase = np.einsum("bnh,bnhv->bnv", k[:, :, t], S_read)
            w = w - b * erase if beta_on_keys else b * w - erase if beta_on_values else \
                b * (w - erase)
        if read_first:
            o[:, :, t] = np.einsum("bnh,bnhv->bnv", q[:, :, t], S)
        S = S + k[:, :, t][..., :, None] * w[..., None, :]
        if decay_after_write:
            S = g * S
        if not read_first:
            o[:, :, t] = np.einsum("bnh,bnhv->bnv", q[:, :, t], S)
    return o


def chunkwise(q, k, v, log_decay=None, beta=None, *, chunk, causal="j<=i", carry=True,
              state_first=False, reset_per_head=True, decay_twice=False, exclusive=False,
              since_start=True, until_end=True, across=True, solve="j<i", erase="decayed",
              beta_on_keys=False, beta_in_lower=True, beta_in_rhs=True,
              last_row_unsolved=False, read_bf16=False, predict_bf16=False,
              state_bf16=False, read_with="q", predict="k", factors_swapped=False,
              beta_on_values=False, intra_values="u", lower_from="k", handed=None):
    """o [B, N, T, Hv] in float64, chunk by chunk as the kernels compute it, with flags
    for the known near-misses (the defaults give the right answer):
      causal      "j<=i" right, "j<i" the diagonal left out, "all" the future seen,
                  "j>=i" the mask transposed (the future seen, the past hidden);
      carry       False: the state is reset at every chunk (never carried);
      state_first the state updated with the chunk before the chunk reads it;
      reset_per_head False: the state carried from one (b, n) sequence into the next;
      decay_twice the state's contribution decayed by the whole chunk, then per row;
      exclusive   b_i = log_decay_0 + ... + log_decay_{i-1} (the own step left out);
      since_start, until_end, across: False leaves that decay factor out (since_start
                  of q S only: the prediction's is erase="undecayed");
      solve       "j<i" right, "j<=i" the diagonal in the triangular system, "j>i"
                  its mask transposed (substitution in row order then reads only
                  rows not yet solved: u = rhs - upper @ rhs),
                  "undecayed" the system without the decay, None: no system (u = the
                  right-hand side);
      erase       "decayed" right, "undecayed" S_prev not decayed to row i, "none" no
                  erase at all (u = beta v); beta_on_keys: u = v - beta k S;
      beta_in_lower, beta_in_rhs: False leaves beta out of L, or out of the
                  right-hand side beta (V - K S);
      last_row_unsolved  the solve stops a row short (the last row keeps its
                  right-hand side);
      read_bf16, predict_bf16, state_bf16: the state rounded to bfloat16 for q S, for
                  the delta rule's prediction K S, or kept in bfloat16;
      read_with   "q" right, "k": the state read with the chunk's keys, K S for Q S;
      predict     "k" right, "q": the delta rule's prediction made with the queries;
      factors_swapped  since_start and until_end unpacked in each other's place;
      beta_on_values  the right-hand side beta V - K S (beta on the values only);
      intra_values  "u" right, "v": the output's causal part sums v, not u;
      lower_from  "k" right, "q": L made from q_i . k_j, not k_i . k_j;
      handed      a list: each chunk's state as it reaches the chunk (the state the
                  recurrence hands on, float64 [H, Hv]) is appended to it, in order
                  (b, n, chunk)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    B, N, T, H = q.shape
    o = np.zeros(v.shape)
    S = np.zeros((H, v.shape[-1]))
    masks = {"j<=i": np.tril, "j<i": lambda m: np.tril(m, -1), "all": lambda m: m}
    for b in range(B):
        for n in range(N):
            if reset_per_head:
                S = np.zeros_like(S)
            for start in range(0, T, chunk):
                rows = slice(start, start + chunk)
                Q, K, V = q[b, n, rows], k[b, n, rows], v[b, n, rows]
                C = len(Q)
                a = np.zeros(C) if log_decay is None else np.asarray(
                    log_decay[b, n, rows], np.float64)
                cum = np.cumsum(a) - (a if exclusive else 0)
                total = a.sum()
                with np.errstate(over="ignore"):
                    within = np.exp(np.minimum(cum[:, None] - cum[None, :], 700))
                within = np.tril(within).T if causal == "j>=i" else masks[causal](within)
                decayed, to_end = np.exp(cum)[:, None], np.exp(total - cum)[:, None]
                if factors_swapped:
                    decayed, to_end = to_end, decayed
                factor = decayed if since_start else np.ones((C, 1))   # for q S only
                to_end = to_end if until_end else np.ones((C, 1))
                if handed is not None:
                    handed.append(S.copy())
                whole = np.exp(total) if across else 1.0
                if beta is None:
                    u = V
                else:
                    bt = np.asarray(beta[b, n, rows], np.float64)[:, None]
                    if erase == "none":
                        u = bt * V
                    else:
                        seen = bf16(S) if predict_bf16 else S
                        pred = (Q if predict == "q" else K) @ seen * (
                            decayed if erase == "decayed" else 1.0)
                        u = V - bt * pred if beta_on_keys else bt * V - pred \
                            if beta_on_values else (bt if beta_in_rhs else 1.0) * (V - pred)
                        if solve == "j>i":   # rows after i, still their right-hand side
                            u = u - np.triu(bt * (K @ K.T), 1) @ u
                        elif solve is not None:
                            keep = np.tril(np.ones((C, C)), 0 if solve == "j<=i" else -1)
                            decay = 1.0 if solve == "undecayed" else np.exp(np.where(
                                keep > 0, cum[:, None] - cum[None, :], -np.inf))
                            lower = np.where(keep > 0, (bt if beta_in_lower else 1.0)
                                             * ((Q if lower_from == "q" else K) @ K.T)
                                             * decay, 0.0)
                            for i in range(C - 1 if last_row_unsolved else C):
                                u[i] = u[i] - lower[i] @ u   # rows of u in order, in place
                new_S = whole * S + (K * to_end).T @ u
                if state_bf16:
                    new_S = bf16(new_S)
                read = new_S if state_first else S
                if read_bf16:
                    read = bf16(read)
                from_state = factor * ((K if read_with == "k" else Q) @ read) * (
                    whole if decay_twice else 1.0)
                o[b, n, rows] = (Q @ K.T * within) @ (V if intra_values == "v" else u) \
                    + from_state
                S = new_S if carry else np.zeros_like(S)
    return o


def bf16(x):
    """x rounded to bfloat16, back in float64 (what a bf16 buffer would hold)."""
    return np.asarray(np.asarray(x, np.float64).astype(jnp.bfloat16), np.float64)


def expected_and_wrong(q, k, v, log_decay=None, beta=None, *, chunk, dtype):
    """The expected output in the inputs' dtype, and a function that makes the output
    of a known near-miss (chunkwise with its flags) in the same dtype. ``wrong.handed()``
    gives the states the recurrence hands to each chunk, [B, N, chunks, H, Hv]."""
    expected = recurrence(q, k, v, log_decay, beta).astype(dtype)

    def wrong(**flags):
        return lambda: chunkwise(q, k, v, log_decay, beta, chunk=chunk, **flags).astype(dtype)

    def handed():
        states = []
        chunkwise(q, k, v, log_decay, beta, chunk=chunk, handed=states)
        B, N = q.shape[:2]
        return np.stack(states).reshape(B, N, -1, *states[0].shape)

    wrong.handed = handed
    return expected, wrong


# --- the state handed on, or its read? ----------------------------------------------

def check_chunked(ran, expected, *, wrong, likely, chunk, tolerance):
    """check() of a chunked kernel's output, with the evidence that separates the two
    causes of "the first chunk right, every later one wrong": the first chunk reads an
    empty state, so a wrong state and a wrong read of the right state look alike there.
    A read of the state is linear in it: if the state reaching chunk c is right (S_c,
    the recurrence's), any wrong read of it errs by X S_c for some matrix X. So when
    every later chunk's error is X S_c (least squares leaves nothing over), the read is
    what to question; when no X fits, the state reaching the chunks is wrong. Said only
    where S_c has fewer rows than columns (H < Hv): otherwise every error is some X S_c
    and the outputs cannot tell the two apart."""
    try:
        check(ran, expected, blocks=(1, 1, chunk, None), axes="B N T Hv",
              tolerance=tolerance, likely=likely)
    except Mismatch as mismatch:
        raise _HandedOn(mismatch, wrong, chunk) from None


class _HandedOn(Mismatch):
    """A Mismatch whose "later_blocks" finding is replaced by what the states show."""

    def __init__(self, mismatch, wrong, chunk):
        self.__dict__.update(mismatch.__dict__)
        AssertionError.__init__(self, *mismatch.args)
        self._wrong, self._chunk = wrong, chunk

    def findings(self):
        findings = super().findings()
        if findings and findings[0].kind == "later_blocks":
            shown = _state_or_read(self.yours, self.expected, self._wrong, self._chunk,
                                   self.tolerance)
            if shown is not None:
                findings[0] = Finding(*shown, facts=findings[0].facts, detail="T")
        return findings


def _state_or_read(yours, expected, wrong, chunk, tolerance):
    """(kind, says) from the states handed on, or None where they cannot tell."""
    y, e = (np.asarray(x, np.float64) for x in (yours, expected))
    if np.isnan(y).any():
        return None
    # What the earlier chunks give each chunk: the right output less the chunk's own,
    # from an empty state. Scaled by one factor, the state or its read is scaled.
    earlier = e - np.asarray(wrong(carry=False)(), np.float64)
    alpha = 1 + np.sum((y - e) * earlier) / max(np.sum(earlier * earlier), 1e-300)
    if close(y, e + (alpha - 1) * earlier, tolerance).all():
        return "state_scaled", (
            f"the first chunk is right, and in every later one what the earlier chunks "
            f"give is {alpha:.3g} times the right amount (your output = the chunk's own "
            f"part + {alpha:.3g} × the earlier chunks' part). Is the state handed on "
            f"{alpha:.3g} times the right one (an update subtracted gives -1, one added "
            "twice 2), or is its read scaled?")
    states = wrong.handed()
    if states.shape[-2] >= states.shape[-1] or states.shape[2] < 2:
        return None
    read = e.copy()   # the right output plus the best linear read of the right state
    for b, n, c in np.ndindex(*states.shape[:3]):
        if c == 0:
            continue
        rows = slice(c * chunk, (c + 1) * chunk)
        S = states[b, n, c]
        X = np.linalg.lstsq(S.T, (y[b, n, rows] - e[b, n, rows]).T, rcond=None)[0].T
        read[b, n, rows] += X @ S
    if close(y, read, tolerance).all():
        return "state_read", (
            "the first chunk is right and every later one is wrong by a read of the right "
            "state: chunk c errs by X S_c, S_c the state the recurrence hands to it (least "
            "squares finds an X that leaves nothing over), as a wrong read of the right "
            "state would. Is the state read with another matrix than q, or without its "
            "decay?")
    return "state_handed_on", (
        "the first chunk is right and every later one is wrong, and no read of the right "
        "state explains it (no X makes chunk c's error X S_c, S_c the state the "
        "recurrence hands to it): the state that reaches the later chunks is wrong. Is "
        "it updated before it is used, not updated, updated with the wrong value, or "
        "reset where it should carry on?")


# --- known near-misses, as likely= dicts -------------------------------------------

def recurrent_likely(q, k, v, log_decay, beta, dtype):
    """The recurrence's near-misses (puzzle 1): o_t read before the update, the decay
    applied after the write, the erase reading the undecayed state, beta on k only."""

    def wrong(**flags):
        return lambda: recurrence(q, k, v, log_decay, beta, **flags).astype(dtype)

    return {"read_first": wrong(read_first=True),
            "decay_after_write": wrong(decay_after_write=True),
            "erase_undecayed": wrong(erase_undecayed=True),
            "beta_on_keys": wrong(beta_on_keys=True),
            "beta_on_values": wrong(beta_on_values=True),
            "decay_not_exp": wrong(decay_not_exp=True)}


def intra_likely(q, k, v, *, chunk, dtype):
    """The intra-chunk kernel's near-misses (puzzle 2): the future seen, the diagonal
    left out, the state carried from chunk to chunk (the whole recurrence)."""

    def within(**flags):   # every chunk on its own: no state between chunks
        return lambda: chunkwise(q, k, v, chunk=chunk, carry=False, **flags).astype(dtype)

    return {"future_visible": within(causal="all"),
            "diagonal_excluded": within(causal="j<i"),
            "mask_transposed": within(causal="j>=i"),
            "state_carried": lambda: recurrence(q, k, v).astype(dtype)}


def chunked_likely(wrong):
    """The chunked kernel's near-misses (puzzle 3), from ``expected_and_wrong``'s wrong.
    Every later puzzle repeats this kernel, so each of them offers these too."""
    return {"state_first": wrong(state_first=True),
            "state_dropped": wrong(carry=False),
            "future_visible": wrong(causal="all"),
            "diagonal_excluded": wrong(causal="j<i"),
            "mask_transposed": wrong(causal="j>=i"),
            "read_with_keys": wrong(read_with="k"),
            "state_across_heads": wrong(reset_per_head=False),
            "state_read_in_bf16": wrong(read_bf16=True),
            "state_in_bf16": wrong(state_bf16=True)}


def gating_likely(wrong):
    """The gated kernel's near-misses (puzzle 4): the chunked kernel's, each decay
    factor left out or taken twice, two factors unpacked in each other's place, the own
    step left out of b. The gated delta rule repeats them all."""
    return {**chunked_likely(wrong),
            "decay_twice": wrong(decay_twice=True),
            "decay_exclusive": wrong(exclusive=True),
            "state_not_decayed": wrong(across=False),
            "writes_not_decayed": wrong(until_end=False),
            "rows_not_decayed": wrong(since_start=False),
            "factors_swapped": wrong(factors_swapped=True)}


def substitution_likely(lower, rhs, expected):
    """forward_substitution's near-misses: the last row left unsolved, and every row
    changed at every step (no jnp.where)."""
    C = len(lower)

    def last_row_unsolved():
        return np.concatenate([expected[:-1], rhs[-1:]]).astype(np.float32)

    def all_rows_changed():   # no jnp.where: step i subtracts lower_i @ u from every row
        u = np.asarray(rhs, np.float64)
        for i in range(C):
            u = u - lower[i] @ u
        return u.astype(np.float32)

    def earlier_rows_changed():   # jnp.where(rows <= i, ...): rows 0 .. i all change
        u = np.asarray(rhs, np.float64).copy()
        for i in range(C):
            u[:i + 1] = u[:i + 1] - lower[i] @ u
        return u.astype(np.float32)

    return {"last_row_unsolved": last_row_unsolved, "all_rows_changed": all_rows_changed,
            "earlier_rows_changed": earlier_rows_changed}


def delta_likely(wrong):
    """The known near-misses of the delta rule's kernels (puzzles 5 and 6): the chunked
    kernel's, and the triangular system's and the erase's."""
    return {**chunked_likely(wrong),
            "solve_diagonal": wrong(solve="j<=i"),
            "beta_on_keys": wrong(beta_on_keys=True),
            "beta_left_out_of_lower": wrong(beta_in_lower=False),
            "beta_left_out_of_rhs": wrong(beta_in_rhs=False),
            "last_row_unsolved": wrong(last_row_unsolved=True),
            "no_solve": wrong(solve=None),
            "no_erase": wrong(erase="none"),
            "prediction_with_queries": wrong(predict="q"),
            "system_mask_transposed": wrong(solve="j>i"),
            "beta_on_values": wrong(beta_on_values=True),
            "output_from_v": wrong(intra_values="v"),
            "system_from_queries": wrong(lower_from="q"),
            "prediction_in_bf16": wrong(predict_bf16=True)}


def gated_delta_likely(wrong, q, k, v, log_decay, beta, *, chunk, dtype):
    """The gated delta rule's near-misses (puzzle 6): gating's and the delta rule's (it
    repeats both), the system or the erase without the decay, the gates swapped."""
    return {**gating_likely(wrong), **delta_likely(wrong),
            "undecayed_solve": wrong(solve="undecayed"),
            "erase_undecayed": wrong(erase="undecayed"),
            # beta_ref and log_decay_ref taken in the other order
            "gates_swapped": lambda: chunkwise(q, k, v, beta, log_decay,
                                               chunk=chunk).astype(dtype)}


def api_likely(q, k, v, gate, *, T, chunk, dtype):
    """A public function's near-misses (puzzle 7), for its gates ``gate`` ({} or
    log_decay and/or beta): T padded in front instead of at the end, and (with both
    gates) beta and log_decay handed to the kernel in the other order."""

    def shifted(gate=gate):   # padded in front: every output comes `pad` tokens late
        pad = -T % min(chunk, -(-T // 8) * 8)
        front = [np.pad(x, ((0, 0), (0, 0), (pad, 0), (0, 0))) for x in (q, k, v)]
        padded = {key: np.pad(x, ((0, 0), (0, 0), (pad, 0))) for key, x in gate.items()}
        return recurrence(*front, **padded)[:, :, :T].astype(dtype)

    def cut_from_end():   # padded at the end, and the last T rows kept
        pad = -T % min(chunk, -(-T // 8) * 8)
        back = [np.pad(x, ((0, 0), (0, 0), (0, pad), (0, 0))) for x in (q, k, v)]
        padded = {key: np.pad(x, ((0, 0), (0, 0), (0, pad))) for key, x in gate.items()}
        return recurrence(*back, **padded)[:, :, pad:].astype(dtype)

    likely = {"padded_in_front": shifted, "cut_from_end": cut_from_end}
    if len(gate) == 2:   # beta and log_decay handed to the kernel in the other order
        likely["gates_swapped"] = lambda: recurrence(
            q, k, v, log_decay=gate["beta"], beta=gate["log_decay"]).astype(dtype)
    return likely


# --- budgets: dot work, bytes and VMEM ---------------------------------------------

def flops_of(ran, flops):
    """The first of the right counts ``flops`` (a function of solved_rows, the rows the
    forward substitution runs) that is the kernel's, else the first: a substitution
    from row 1 is as right as one from row 0 (row 0 has nothing to subtract)."""
    right = [flops(solved_rows=None), flops(solved_rows=-1)]
    return next((f for f in right if f == ran.work), right[0])


def chunk_flops(B, N, T, H, Hv, chunk, *, delta=False, solved_rows=None):
    """The dots of the chunked kernels, per chunk: scores q k^T (C x C x H), scores @ v
    (C x C x Hv), q S and the update K^T V (C x H x Hv each); the delta rule adds k k^T,
    k S, the forward substitution (one (1, C) @ (C, Hv) row per row) and nothing else.
    solved_rows: the rows the substitution runs (C; C - 1 is as right: row 0 of a
    strictly lower system has nothing to subtract): -1 for C - 1, None for C."""
    C = chunk
    per_chunk = 2 * C * C * (H + Hv) + 2 * 2 * C * H * Hv
    if delta:
        rows = C - 1 if solved_rows == -1 else C
        per_chunk += 2 * C * C * H + 2 * C * H * Hv + 2 * rows * C * Hv
    return B * N * (T // C) * per_chunk


def state_flops(B, N, T, H, Hv, chunk, *, delta=False):
    """Of ``chunk_flops``, the dots that may multiply float32 operands whatever the
    inputs' dtype: those that read the state (q S; the delta rule's k S) and the delta
    rule's forward substitution, a solve whose rounding would compound row by row. The
    products of two input blocks take the inputs' dtype."""
    C = chunk
    per_chunk = 2 * C * H * Hv + (2 * C * H * Hv + 2 * C * C * Hv if delta else 0)
    return B * N * (T // C) * per_chunk


def api_state_flops(B, N, T, H, Hv, chunk, names):
    """``state_flops`` of the public functions ``names`` (as ``api_flops``)."""
    C = api_chunk(T, chunk)
    padded = -(-T // C) * C
    return sum(state_flops(B, N, padded, H, Hv, C, delta="delta" in name) for name in names)


def check_products_in_input_dtype(ran, dtype, *, most_wide):
    """Where the inputs are bfloat16, the dots multiply bfloat16 blocks, except
    ``most_wide`` flops (``state_flops``): the MXU takes bf16 at full rate and sums in
    float32 when asked; float32 operands (blocks cast up) take it several passes. Read
    from the dots the kernels executed, by their operands' dtype."""
    if np.dtype(dtype) != np.dtype("bfloat16"):
        return
    wide = sum(flops for counts in ran.counts for kind, flops in counts.dot_flops.items()
               if kind != "bfloat16")
    if wide > most_wide:
        fail("dot_dtype", (
            f"your dots multiply {wide - most_wide:,} flops' worth of float32 operands that "
            "should be bfloat16: the products of two input blocks (q kᵀ, the masked "
            "scores @ v, Kᵀ V) take the inputs' dtype and give float32 sums "
            "(preferred_element_type=jnp.float32), the scores rounded to v's dtype before "
            "they meet v. Only the products that read the float32 state (q S, and the "
            "delta rule's k S and its substitution) stay float32. Cast up first and the "
            "sums are as right, but each product takes the MXU several passes."),
            [("dots", f"dot flops with float32 operands: {wide:,} · the state's products: "
                      f"{most_wide:,}")])


def quadratic_flops(B, N, T, H, Hv, chunk):
    """Causal attention over every earlier key, chunk by chunk: the O(T^2) way."""
    chunks = T // chunk
    return B * N * sum(2 * chunk * (c + 1) * chunk * (H + Hv) for c in range(chunks))


def intra_flops(B, N, T, H, Hv, chunk):
    """The dots of the intra-chunk kernel: per chunk, the scores q k^T (C x C x H) and
    scores @ v (C x C x Hv); nothing between chunks."""
    return B * N * (T // chunk) * 2 * chunk * chunk * (H + Hv)


def api_chunk(T, chunk):
    """The chunk the public functions run with: a chunk longer than the sequence shrinks
    to it, rounded up to 8 rows."""
    return min(chunk, -(-T // 8) * 8)


def api_flops(B, N, T, H, Hv, chunk, names, *, solved_rows=None):
    """The dots of the public functions ``names`` on one set of inputs: T padded to a
    whole number of chunks (``api_chunk``), the delta rule's extra dots for those named
    delta."""
    C = api_chunk(T, chunk)
    padded = -(-T // C) * C
    return sum(chunk_flops(B, N, padded, H, Hv, C, delta="delta" in name,
                           solved_rows=solved_rows) for name in names)


def chunked_vmem(chunk, H, Hv, itemsize):
    """VMEM of a chunked kernel: one chunk of q, k, v and o (two buffers each) and one
    [H, Hv] float32 state."""
    return 2 * (2 * chunk * H + 2 * chunk * Hv) * itemsize + H * Hv * 4


def check_moves_once(ran, *arrays, out_bytes):
    """Each input read once, the output written once, nothing else: the state stays in
    VMEM from the first chunk to the last."""
    for array in arrays:
        read = ran.bytes_from(array, "read")
        if read > array.nbytes:
            fail("traffic", (
                f"an input of shape {array.shape} was read {read / array.nbytes:.3g} times "
                "over: each chunk of q, k and v is needed by one grid step only, and the "
                "earlier chunks reach it through the state."),
                [("bytes", f"read {read:,} B of an input of {array.nbytes:,} B")])
    needed = sum(a.nbytes for a in arrays) + out_bytes
    check_traffic(ran, reference=needed, minimum=needed)


# --- checks that word a learner's sentence ------------------------------------------

def check_chunks_in_order(ran):
    """The chunk axis (the grid's last) carries the state: it must be "arbitrary"."""
    for site in ran.program.sites:
        call = site.call
        if len(call.semantics) == len(call.grid) and call.grid[-1] > 1 \
                and call.semantics[-1] != "arbitrary":
            fail("parallel_chunks", (
                f"the chunk axis of {call.name}() is marked \"{call.semantics[-1]}\": a TPU "
                "with two cores splits a \"parallel\" axis between them, and the second "
                "core would start its half of the chunks from an empty state. The state "
                "carries chunk c into chunk c + 1: mark that axis \"arbitrary\"."),
                [("semantics", f"{call.name}(): {call.semantics}, grid {call.grid}")])


def check_chunk_rounded(ran, *, T, chunk):
    """A chunk longer than the sequence shrinks to T rounded up to a multiple of 8."""
    C = min(chunk, -(-T // 8) * 8)
    for site in ran.program.sites:
        shape = site.call.blocks[0].block_shape
        rows = shape[-2] if len(shape) >= 2 else None
        if rows is not None and rows != C and rows % 8:
            fail("chunk_not_rounded", (
                f"{site.call.name}() ran with chunks of {rows} rows: a chunk longer than the "
                f"sequence shrinks to T rounded up to a multiple of 8 ({C} here), not to T "
                "itself, and T is padded with zeros up to it. The values are right, and a "
                "block as long as the whole T is legal; but a TPU lays VMEM out in tiles of "
                "8 rows, so a shorter block takes a whole tile anyway, and this puzzle's "
                "kernels work on whole tiles."),
                [("chunk", f"{site.call.name}(): yours {rows} rows · the puzzle's {C} "
                           f"(T={T}, chunk={chunk})")])


def check_factors(factors, C):
    """decay_factors returned four arrays of the shapes (within (C, C), since_start
    (C, 1), until_end (C, 1), across (1, 1)); returns them as NumPy arrays."""
    names = ("within", "since_start", "until_end", "across")
    shapes = ((C, C), (C, 1), (C, 1), (1, 1))
    if not isinstance(factors, (tuple, list)) or len(factors) != 4:
        fail("factors_returned", "decay_factors returns a tuple of four arrays: (within "
             "(C, C), since_start (C, 1), until_end (C, 1), across (1, 1)).")
    factors = [np.asarray(x) for x in factors]
    for name, yours, shape in zip(names, factors, shapes):
        if yours.shape != shape:
            fail("factor_shape", f"{name} should have shape {shape}, not {yours.shape}: "
                 "sum with keepdims=True, so that a (C, 1) column scales the rows of q S "
                 "and of k by broadcasting.", [("shape", f"{name}: expected {shape} · yours "
                                                         f"{yours.shape}")])
    return factors


def holds_narrow_floats(function, *args):
    """Whether ``function(*args)``'s traced program holds any bf16 or f16 value: where it
    holds none, small errors are no rounding, and the diagnosis must not say they are."""
    return _narrow_floats(jax.make_jaxpr(function)(*args).jaxpr)


def check_factor(yours, expected, *, name, narrow, likely):
    """check() of one of decay_factors' outputs (float32, tolerance 1e-3), told whether
    the function holds any narrow float (``holds_narrow_floats``)."""
    try:
        check(yours, expected, name=name, tolerance=1e-3, likely=likely)
    except Mismatch as mismatch:
        mismatch.narrow = narrow
        raise


def check_within_masked(within):
    """No NaN above the diagonal of within, evaluated one operation at a time: an exp
    that overflowed, times a 0/1 mask."""
    C = len(within)
    nan = np.isnan(within)
    if nan.any() and not nan[np.tri(C, dtype=bool)].any():   # inf * 0 above the diagonal
        fail("decay_overflow", OVERFLOW_TIMES_ZERO, [
            ("within", f"{int(nan.sum())} of the {C * (C - 1) // 2} entries above the "
                       "diagonal are NaN, evaluated one operation at a time (as a TPU "
                       "computes them, with no rewrite of the product into a select)")])


def check_names_bad_argument(function, q, k, v, beta, *, chunk, bad):
    """function(q, k, v, beta, chunk=chunk), with the argument ``bad`` wrong, raises a
    ValueError naming it before any kernel is built (traced, not run)."""
    called = f"delta_rule(q {q.shape}, k {k.shape}, v {v.shape}, beta {beta.shape}, chunk={chunk})"
    try:
        jax.eval_shape(functools.partial(function, chunk=chunk), q, k, v, beta)
    except ValueError as error:
        if bad not in str(error):
            fail("argument_check", f"{called} raised a ValueError that does not name "
                 f"{bad}: say which argument is wrong.", [("called", called),
                                                         ("raised", str(error)[:200])])
        return
    except NotImplementedError:
        raise
    except Exception as error:
        fail("argument_check", f"{called} should raise a ValueError that names {bad} before "
             "any kernel is built; it failed later, inside JAX.",
             [("called", called),
              ("raised", raised(error))])
    fail("argument_check", f"{called} should raise a ValueError that names {bad}; it raised "
         "nothing.", [("called", called), ("raised", "nothing")])


# --- read from your kernel's program: what the values on a CPU cannot show --------

OVERFLOW_TIMES_ZERO = (
    "exp before masking: above the diagonal b_i - b_j > 0, so with strong decay exp(b_i - "
    "b_j) overflows to inf there, and a 0/1 mask times inf is NaN on a TPU. XLA on CPU turns "
    "that product into a select, so your values look right here; the kit reads the exp and "
    "the mask from your program. Mask the exponent first, then exp: "
    "jnp.exp(jnp.where(col <= row, b - b_row, -jnp.inf)); exp(-inf) is 0.")


def _labelled(jaxpr, rule, labels=()):
    """Labels every value of `jaxpr` forward, from the labels of its inputs: `rule(eqn,
    ins)` gives the labels of an equation's outputs from those of its inputs and may
    yield findings, which this yields. A jit's body (jnp.where is one) is walked with
    the caller's labels; the bodies of loops and branches on their own."""
    label = dict(zip(jaxpr.invars, labels))

    def of(v):
        return frozenset({"const"}) if jaxcompat.is_literal(v) else label.get(v, frozenset())

    for eqn in jaxpr.eqns:
        ins = [of(v) for v in eqn.invars]
        view = jaxcompat.control(eqn)
        if isinstance(view, jaxcompat.Inline):
            outs = yield from _labelled(view.body[0], rule, ins)
        else:
            for body, _ in jaxcompat.parts(eqn):
                yield from _labelled(body, rule)
            out = yield from rule(eqn, ins)
            outs = [out] * len(eqn.outvars)
        label.update(zip(eqn.outvars, outs))
    return [of(v) for v in jaxpr.outvars]


# Ops through which a value keeps its labels: elementwise arithmetic, casts, and
# relabellings of the same values.
_KEEPS = {"mul", "div", "add", "sub", "neg", "convert_element_type", "broadcast_in_dim",
          "reshape", "transpose", "squeeze", "expand_dims", "get"}


def _exp_times_mask(eqn, ins):
    """Labels: ("exp", eqn) an exp of an exponent that nothing bounded (no jnp.where, no
    minimum), or arithmetic on one; "mask" a 0/1 float made from a comparison
    ((col <= row).astype(...), a bool times a float, jnp.where(col <= row, 1.0, 0.0));
    "const" a literal; "bounded" a jnp.where or a minimum. Finds (exp, mul): a mask
    times an unbounded exp."""
    name = eqn.primitive.name
    exps = {x for found in ins for x in found if isinstance(x, tuple)}
    if name == "mul" and any("mask" in found for found in ins):
        for exp in exps:
            yield exp[1], eqn
    if name == "exp":
        return frozenset() if "bounded" in ins[0] else frozenset({("exp", eqn)})
    if name in ("select_n", "min", "clamp"):
        constant = all("const" in found for found in ins[1:])   # jnp.where(c, 1.0, 0.0)
        return frozenset({"bounded", "mask"} if constant else {"bounded"})
    if name == "convert_element_type" and eqn.invars[0].aval.dtype == np.bool_:
        return frozenset({"mask"})
    out = set(exps) if name in _KEEPS else set()
    if name in _KEEPS - {"mul", "div", "add", "sub", "neg"}:
        out |= {x for found in ins for x in found if x in ("mask", "bounded", "const")}
    return frozenset(out)


def check_decay_masked(ran):
    """No exp in the gated kernels is multiplied by a 0/1 mask: an overflow times zero is
    NaN on a TPU, and XLA on CPU hides it (it turns x * convert(mask) into a select)."""
    for site in ran.program.sites:
        kernel = site.call.kernel
        for exp, mul in _labelled(kernel, _exp_times_mask):
            shape = "x".join(map(str, exp.outvars[0].aval.shape))
            fail("decay_overflow", OVERFLOW_TIMES_ZERO,
                 [("kernel", f"{site.call.name}(): an exp ({shape}) of an exponent no "
                             "jnp.where bounds, times a 0/1 mask made from a comparison")]
                 + [("at", line) for line in _chapter_line(mul)])


def _narrow_state(eqn, ins):
    """Labels: "q", "k" values from those inputs, "state" the state scratch (as it is,
    decayed or updated, never through a matmul), "narrow" the state cast to a float
    narrower than 32 bits. Finds (dot, the labels of its other operand, the narrow dtype):
    a matmul with a narrow state."""
    name = eqn.primitive.name
    if name == "dot_general":
        for narrow, other in ((0, 1), (1, 0)):
            if "narrow" in ins[narrow]:
                yield eqn, ins[other], eqn.invars[narrow].aval.dtype
        return frozenset()
    if name not in _KEEPS:
        return frozenset()
    out = frozenset().union(*ins)
    if name == "convert_element_type" and "state" in out:
        dtype = np.dtype(eqn.outvars[0].aval.dtype)
        if jnp.issubdtype(dtype, jnp.floating) and dtype.itemsize < 4:
            return out | {"narrow"}
    return out


def check_state_read_in_float32(ran):
    """No matmul reads the state rounded to bf16: q S (the output) and k S (the delta
    rule's prediction) read it in float32. The state scratch itself may be float32 and
    the rounding still happen on the way into the matmul, where the precision rule (what
    is carried) does not look."""
    for site in ran.program.sites:
        kernel = site.call.kernel
        labels = [frozenset() for _ in kernel.invars]
        for j, inputs in enumerate(site.inputs):   # operands, by which input they are
            labels[j] = frozenset({"q"} if 0 in inputs else {"k"} if 1 in inputs else ())
        for j in range(len(kernel.invars) - len(site.call.scratch), len(kernel.invars)):
            labels[j] = frozenset({"state"})
        for dot, other, dtype in _labelled(kernel, _narrow_state, labels):
            kind, product = (("prediction_in_bf16", "k S") if "k" in other else
                             ("state_read_in_bf16", "q S"))
            fail(kind, (
                f"the state was rounded to bf16 for {product}: S holds large values whose "
                "low bits bf16 drops. Read it in float32: cast the other operand up, "
                "never S down (jnp.dot(x.astype(jnp.float32), state, "
                "preferred_element_type=jnp.float32))."),
                [("kernel", f"{site.call.name}(): {product} reads the state in {dtype}")]
                + [("at", line) for line in _chapter_line(dot)])


def _chapter_line(eqn):
    """["exercises/linear.py:123"]: the line of the learner's code that made `eqn`, if known."""
    for path, line in jaxcompat.frames(eqn):
        path = path.replace("\\", "/")
        if "/jax/" not in path and "pytest_pallas_hints" not in path \
                and not path.endswith("test_linear.py") and "/python3." not in path:
            return [f"{'/'.join(path.split('/')[-2:])}:{line}"]
    return []


def check_state_reset_once(ran):
    """The state is zeroed under pl.when only: a store of zeros into a scratch, outside
    any pl.when and before anything reads it, runs at every grid step."""
    for site in ran.program.sites:
        kernel = site.call.kernel
        scratch = set(kernel.invars[len(kernel.invars) - len(site.call.scratch):])
        zeros, used = set(), set()

        def zero(v):
            return not np.any(v.val) if jaxcompat.is_literal(v) else v in zeros

        for eqn in kernel.eqns:
            name = eqn.primitive.name
            if name in ("broadcast_in_dim", "convert_element_type", "reshape") \
                    and zero(eqn.invars[0]):
                zeros.add(eqn.outvars[0])
            refs = [v for v in eqn.invars if not jaxcompat.is_literal(v) and v in scratch]
            if name == "swap" and refs and eqn.invars[0] not in used and zero(eqn.invars[1]):
                fail("reset_every_step", (
                    "S is reset at every step: the store of zeros into the state scratch "
                    "runs outside any pl.when, at every grid step, before the state is read, "
                    "so every chunk starts from an empty state and the earlier chunks never "
                    "reach it. Put it under @pl.when(pl.program_id(2) == 0): only the first "
                    "chunk of each sequence starts from zeros."),
                    [("kernel", f"{site.call.name}(): a store of zeros into a scratch of "
                                f"shape {eqn.invars[0].aval.shape} at every grid step")]
                    + [("at", line) for line in _chapter_line(eqn)])
            used.update(refs)


def every_product_moves(T: int, chunk: int) -> bool:
    """Whether every product a chunked kernel computes can move its output on a sequence
    of T tokens (``check_work``'s ``moving``): with a single chunk the state that q and k
    multiply is still zero when it is read (its products are zeros, whatever the
    kernel), and with T = 1, k kᵀ below the diagonal reaches padding rows only."""
    return -(-T // chunk) > 1
