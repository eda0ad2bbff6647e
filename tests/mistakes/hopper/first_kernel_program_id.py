"""hopper.first_kernel: the block asks pl.program_id(0) for its index, as a TPU kernel
would: GPU interpret mode answers 0 in every block, so every block would redo block 0."""
PUZZLE = "hopper.first_kernel"
EXPECT = "pl.program_id is 0 in every block under GPU interpret mode"


def add_one_kernel(x_ref, o_ref, tile, *, block_rows):
    rows = pl.ds(pl.program_id(0) * block_rows, block_rows)
    tile[...] = x_ref[rows] + 1
    o_ref[rows] = tile[...]
