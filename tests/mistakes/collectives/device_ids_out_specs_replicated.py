"""Slip: out_specs=PartitionSpec() (replicated) instead of PartitionSpec(axis_name): only one device's row comes back; diagnosis should point at shard_map's out_specs."""
PUZZLE = "collectives.device_ids"
EXPECT = 'shard_map\'s out_specs decides how they come back'


def device_ids(mesh, *, axis_name):
    def on_each_device():
        return pl.pallas_call(
            functools.partial(device_ids_kernel, axis_name=axis_name),
            out_shape=jax.ShapeDtypeStruct((1, 3), jnp.int32),
            out_specs=pl.BlockSpec(memory_space=pltpu.SMEM),   # three scalars
        )()

    return jax.shard_map(on_each_device, mesh=mesh, in_specs=(),
                         out_specs=PartitionSpec(), check_vma=False)()
