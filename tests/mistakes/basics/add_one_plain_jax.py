"""basics.add_one: computes x + 1 in plain JAX, with no kernel at all."""
PUZZLE = "basics.add_one"
EXPECT = "add_one computes x + 1 without a kernel"


def add_one(x):
    return x + 1
