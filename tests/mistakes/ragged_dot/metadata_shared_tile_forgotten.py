"""ragged_dot.metadata: a group's first tile rounded up, so a tile it shares with the
group before it (its first, partial tile) gets no visit from it."""
PUZZLE = "ragged_dot.metadata"
EXPECT = "round its first row down, not up"


def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    group_sizes = jnp.asarray(group_sizes, jnp.int32)
    num_groups = group_sizes.shape[0]
    tiles_m = pl.cdiv(m, tm)
    num_visits = tiles_m + num_groups - 1
    group_ends = jnp.cumsum(group_sizes)
    group_offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), group_ends]).astype(jnp.int32)
    first_tile = (group_offsets[:-1] + tm - 1) // tm       # the tiles it owns only
    last_tile = (group_ends - 1) // tm
    empty_visits = 1 if visit_empty_groups else 0
    group_tiles = jnp.where(group_sizes > 0, jnp.maximum(last_tile - first_tile + 1, 0),
                            empty_visits)
    first_tile = jnp.minimum(jnp.where(group_sizes > 0, first_tile, group_offsets[:-1] // tm),
                             tiles_m - 1)
    num_tiles = jnp.sum(group_tiles).astype(jnp.int32)
    visit = jnp.minimum(jnp.arange(num_visits, dtype=jnp.int32), num_tiles - 1)
    group_ids = jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_tiles,
                           total_repeat_length=num_visits)[visit]
    first_visit = jnp.cumsum(group_tiles) - group_tiles
    m_tile_ids = first_tile[group_ids] + visit - first_visit[group_ids]
    return group_offsets, group_ids, m_tile_ids.astype(jnp.int32), num_tiles
