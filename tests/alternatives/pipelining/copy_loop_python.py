"""pipelining.copy_loop with a Python loop over the chunks (their number is static),
static slices of the HBM ref, and the float32 sum carried in a Python variable."""
PUZZLE = "pipelining.copy_loop"


def column_sum_kernel(x_hbm, o_ref, chunk_vmem, sem, *, chunk):
    total = jnp.zeros(o_ref.shape, jnp.float32)
    for start in range(0, x_hbm.shape[0], chunk):
        copy = pltpu.make_async_copy(x_hbm.at[start:start + chunk], chunk_vmem, sem)
        copy.start()
        copy.wait()
        total = total + chunk_vmem[...].astype(jnp.float32).sum(axis=0, keepdims=True)
    o_ref[...] = total.astype(o_ref.dtype)
