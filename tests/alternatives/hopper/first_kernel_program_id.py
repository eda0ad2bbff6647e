"""hopper.first_kernel: the block asks pl.program_id(0) for its index, as the Mosaic GPU
docs' matmul does. Right on a Hopper; GPU interpret mode answers 0 in every block, so
the kit cannot run it as a GPU would: the verdict is "cannot be verified here", never
wrong, never passed."""
PUZZLE = "hopper.first_kernel"
UNVERIFIED = "cannot be verified here: pl.program_id in"


def add_one_kernel(x_ref, o_ref, tile, *, block_rows):
    rows = pl.ds(pl.program_id(0) * block_rows, block_rows)
    tile[...] = x_ref[rows] + 1
    o_ref[rows] = tile[...]
