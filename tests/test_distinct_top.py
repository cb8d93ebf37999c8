"""distinct_top (acn/storage/database/lite/index_rows.py) sorts only the leading slots; its answer must be the one a
sort of every slot gives, ties and copies of one text included."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from acn.storage.database.lite.index_rows import DISTINCT_FETCH, distinct_top, first_per_text, kth_best, top_slots


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(1, 60), st.integers(0, 2**32 - 1))
def test_the_leading_slots_give_what_sorting_every_slot_gives(limit: int, distinct_values: int, texts: int,
                                                              seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows = int(rng.integers(1, 8 * DISTINCT_FETCH * limit))
    slots = np.sort(rng.choice(10 * rows, rows, replace=False))
    values = rng.integers(1, distinct_values + 1, rows).astype(np.float64) / 7  # many equal scores
    text_ids = rng.integers(0, texts, 10 * rows).astype(np.int64)  # copies of one text
    expected = first_per_text(slots, values, text_ids)[:limit]
    assert distinct_top(slots, values, limit, text_ids) == expected
    assert distinct_top(slots, values, limit, text_ids, tied=True) == expected  # the BM25 path


def test_of_equal_scores_the_newest_slots_are_sorted() -> None:
    slots = np.arange(10_000)
    values = np.full(10_000, 9.127)
    values[[17, 4_000]] = 15.4
    text_ids = np.arange(10_000, dtype=np.int64)
    assert distinct_top(slots, values, 5, text_ids) == [4_000, 17, 9_999, 9_998, 9_997]


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 2_000), st.integers(1, 50), st.booleans(), st.integers(0, 2**32 - 1))
def test_the_kth_best_value_is_the_same_sorted_or_partitioned(rows: int, distinct_values: int, repeat: bool,
                                                             seed: int) -> None:
    # kth_best sorts values that repeat (BM25) and partitions the others (cosine): the same value either way, and
    # so the same top slots.
    rng = np.random.default_rng(seed)
    values = (rng.integers(0, distinct_values, rows) / 3 if repeat else rng.standard_normal(rows)).astype(np.float64)
    count = int(rng.integers(1, rows + 1))
    expected = np.sort(values)[::-1][count - 1]
    assert kth_best(values, count, tied=True) == expected == kth_best(values, count, tied=False)
    limit = int(rng.integers(1, 40))
    assert top_slots(values, limit, tied=True) == top_slots(values, limit) == [
        int(slot) for slot in np.lexsort((np.arange(rows), -values)) if values[slot] > 0][:limit]
