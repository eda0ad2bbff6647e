"""splash.compact: no compaction: a step for every kv block, as in puzzle 2."""
PUZZLE = "splash.compact"
EXPECT = "not nkv"


def compact(categories):
    categories = np.asarray(categories)
    data_next = np.broadcast_to(np.arange(categories.shape[-1], dtype=np.int32),
                                categories.shape).copy()
    return data_next, categories.astype(np.int32)
