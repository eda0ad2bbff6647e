"""ragged_dot.metadata: the padding left as jnp.repeat makes it (the last group), not
the last real visit."""
PUZZLE = "ragged_dot.metadata"
EXPECT = "Repeat the last real visit instead"


def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    group_sizes = jnp.asarray(group_sizes, jnp.int32)
    num_groups = group_sizes.shape[0]
    tiles_m = pl.cdiv(m, tm)
    num_visits = tiles_m + num_groups - 1
    group_ends = jnp.cumsum(group_sizes)
    group_offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), group_ends]).astype(jnp.int32)
    first_tile = group_offsets[:-1] // tm
    last_tile = (group_ends - 1) // tm
    group_tiles = jnp.where(group_sizes > 0, last_tile - first_tile + 1,
                            1 if visit_empty_groups else 0)
    first_tile = jnp.minimum(first_tile, tiles_m - 1)
    num_tiles = jnp.sum(group_tiles).astype(jnp.int32)
    group_ids = jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_tiles,
                           total_repeat_length=num_visits)
    visit = jnp.minimum(jnp.arange(num_visits, dtype=jnp.int32), num_tiles - 1)
    first_visit = jnp.cumsum(group_tiles) - group_tiles
    m_tile_ids = jnp.where(jnp.arange(num_visits) < num_tiles,
                           first_tile[group_ids] + visit - first_visit[group_ids], tiles_m - 1)
    return group_offsets, group_ids, m_tile_ids.astype(jnp.int32), num_tiles
