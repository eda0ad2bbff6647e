"""ragged_dot.metadata another way: each group's visit count from the tiles of its
first and one-past-last row (ceil of the end, floor of the start), and each visit's
group found by jnp.searchsorted on the running count of visits (no jnp.repeat), the
offsets built with jnp.pad, the visits clamped to the last real one with jnp.minimum."""
from jax import lax

PUZZLE = "ragged_dot.metadata"


def make_group_metadata(group_sizes, m, tm, *, visit_empty_groups=False):
    sizes = jnp.asarray(group_sizes, jnp.int32)
    tiles_m = -(-m // tm)
    offsets = jnp.pad(jnp.cumsum(sizes), (1, 0)).astype(jnp.int32)
    starts, ends = offsets[:-1], offsets[1:]
    spans = jnp.where(sizes > 0, (ends + tm - 1) // tm - starts // tm,
                      1 if visit_empty_groups else 0)
    visits_through = jnp.cumsum(spans)            # visits of groups 0..e together
    num_tiles = visits_through[-1].astype(jnp.int32)
    visit = jnp.minimum(lax.iota(jnp.int32, tiles_m + sizes.shape[0] - 1), num_tiles - 1)
    group_ids = jnp.searchsorted(visits_through, visit, side="right").astype(jnp.int32)
    first_tile = jnp.minimum(starts // tm, tiles_m - 1)
    before = (visits_through - spans)[group_ids]  # visits of the groups before this one
    m_tile_ids = (first_tile[group_ids] + visit - before).astype(jnp.int32)
    return offsets, group_ids, m_tile_ids, num_tiles
