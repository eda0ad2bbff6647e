"""first_kernel: the result goes GMEM -> registers (+1) -> GMEM directly; the SMEM tile
is written and read back, but what is read from it is only mixed in through a select
that never picks it (where(tile == tile, direct, tile)). Dodges 'GMEM -> registers ->
SMEM -> registers -> GMEM' (SMEM used by proxy only)."""
PUZZLE = "hopper.first_kernel"
EXPECT = "what your kernel loads from its SMEM tile never reaches the output"


def add_one_kernel(x_ref, o_ref, tile, *, block_rows):
    rows = pl.ds(lax.axis_index("blocks") * block_rows, block_rows)
    direct = x_ref[rows] + 1
    tile[...] = direct
    back = tile[...]
    o_ref[rows] = jnp.where(back == back, direct, back)
