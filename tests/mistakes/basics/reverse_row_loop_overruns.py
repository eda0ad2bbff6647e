"""basics.reverse: copies row by row in a fori_loop that runs one row past the block
(the read past the end is the kernel's, not an index map's)."""
PUZZLE = "basics.reverse"
EXPECT = "a loop bound that runs one step too far"


def reverse_blocks(x, *, bm=8):
    M, D = x.shape
    n = M // bm

    def rows_kernel(x_ref, o_ref):
        def copy_row(r, carry):
            o_ref[pl.ds(r, 1), :] = x_ref[pl.ds(r, 1), :]
            return carry

        jax.lax.fori_loop(0, bm + 1, copy_row, 0)

    return pl.pallas_call(
        rows_kernel,
        out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
        grid=(n,),
        in_specs=[pl.BlockSpec((bm, D), lambda i: (n - 1 - i, 0))],
        out_specs=pl.BlockSpec((bm, D), lambda i: (i, 0)),
    )(x)
