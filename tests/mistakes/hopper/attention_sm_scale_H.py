"""Slip: sm_scale = 1 / H instead of 1 / sqrt(H); diagnosis should point at the score scale."""
PUZZLE = "hopper.attention"
EXPECT = 'your scores are scaled by 1 / H'


def attention(q, k, v, *, causal=False, block_q=64, block_kv=64):
    B, N, T, H = q.shape
    Bk, K, S, Hk = k.shape
    if (Bk, Hk) != (B, H) or v.shape != k.shape or N % K:
        raise ValueError(f"attention: q [B, N, T, H] = {q.shape} and k, v [B, K, S, H] = "
                         f"{k.shape}, {v.shape}: B and H must agree and K divide N")
    _check_16_bit("attention", q, k, v)
    if block_q % 64:
        raise ValueError(f"attention: block_q={block_q} must be a multiple of 64 (a "
                         "wgmma's M)")
    if block_kv % 64:
        raise ValueError(f"attention: block_kv={block_kv} must be a multiple of 64")
    _check_divides("attention", "block_q", block_q, T, "T")
    _check_divides("attention", "block_kv", block_kv, S, "S")
    transforms = wgmma_transforms(H, q.dtype)
    kernel = functools.partial(attention_kernel, causal=causal, block_q=block_q,
                               block_kv=block_kv, sm_scale=1 / H)
    return plgpu.kernel(
        kernel,
        out_type=jax.ShapeDtypeStruct(q.shape, q.dtype),
        grid=(B, N, T // block_q),
        grid_names=("b", "n", "q"),
        scratch_types=[
            plgpu.SMEM((block_q, H), q.dtype, transforms=transforms),
            plgpu.SMEM((block_q, block_kv), q.dtype,
                       transforms=wgmma_transforms(block_kv, q.dtype)),
            plgpu.SMEM((block_q, H), q.dtype),
            plgpu.Barrier(),
        ],
    )(q, k, v)
