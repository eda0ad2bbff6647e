"""ragged_dot.metadata: m_tile_ids uses the unclamped step index, so padding steps' tiles
keep counting up past the last real tile."""
PUZZLE = "ragged_dot.metadata"
EXPECT = "past num_tiles your m_tile_ids keep counting up"


def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    group_sizes = jnp.asarray(group_sizes, jnp.int32)
    num_groups = len(group_sizes)
    tiles_m = pl.cdiv(m, tm)
    num_visits = tiles_m + num_groups - 1          # the most visits any sizes need

    group_ends = jnp.cumsum(group_sizes)
    group_offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), group_ends]).astype(jnp.int32)
    group_starts = group_offsets[:-1]

    # A group visits every row tile it has a row in: from the tile of its first row to
    # the tile of its last. A tile two groups share is visited once by each.
    first_tile = group_starts // tm
    last_tile = (group_ends - 1) // tm
    empty_visits = 1 if visit_empty_groups else 0
    group_tiles = jnp.where(group_sizes > 0, last_tile - first_tile + 1, empty_visits)
    first_tile = jnp.minimum(first_tile, tiles_m - 1)   # an empty group at the very end
    num_tiles = jnp.sum(group_tiles).astype(jnp.int32)

    # Visit v belongs to group group_ids[v]; past num_tiles, repeat the last real visit.
    visit = jnp.minimum(jnp.arange(num_visits, dtype=jnp.int32), num_tiles - 1)
    group_ids = jnp.repeat(jnp.arange(num_groups, dtype=jnp.int32), group_tiles,
                           total_repeat_length=num_visits)[visit]
    first_visit = jnp.cumsum(group_tiles) - group_tiles    # each group's first visit
    m_tile_ids = first_tile[group_ids] + jnp.arange(num_visits) - first_visit[group_ids]
    return group_offsets, group_ids, m_tile_ids.astype(jnp.int32), num_tiles
