"""ragged_dot.k_axis (shortcut): a kernel copies lhs; jax.lax.ragged_dot does the work."""
PUZZLE = "ragged_dot.k_axis"
EXPECT = "happens outside your kernel"


def gmm(lhs, rhs, group_sizes, *, tiling=(128, 128, 128)):
    def copy_kernel(x_ref, o_ref):
        o_ref[...] = x_ref[...]

    lhs = pl.pallas_call(copy_kernel, out_shape=jax.ShapeDtypeStruct(lhs.shape, lhs.dtype))(lhs)
    return jax.lax.ragged_dot(lhs, rhs, group_sizes, preferred_element_type=jnp.float32) \
        .astype(lhs.dtype)
