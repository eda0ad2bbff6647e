"""basics.outer_add: broadcasts x and y to (M, N) in JAX, then adds tiles."""
PUZZLE = "basics.outer_add"
EXPECT = "pass the (M, 1) and (1, N) arrays themselves"


def outer_add(x, y, *, bm=8, bn=128):
    (M, _), (_, N) = x.shape, y.shape
    return add_2d(jnp.broadcast_to(x, (M, N)), jnp.broadcast_to(y, (M, N)), bm=bm, bn=bn)
