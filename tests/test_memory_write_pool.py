"""The dedup pool's near-duplicate lookup against its definition: the best Dice of the same scope and kind."""

from __future__ import annotations

from typing import cast

from hypothesis import given, settings
from hypothesis import strategies as st

from memory.items import MemoryItem
from memory.pool import Known, Pool
from storage.memories import MemoryRepository
from text.similarity import shingle_similarity, shingles

# A small alphabet makes texts share many bigrams, so most candidates overlap and the prefix filter must prune.
TEXTS = st.text(alphabet="abcdeXY订单号", min_size=1, max_size=14)
KINDS = st.sampled_from(["fact", "preference"])


def brute_force(pool: list[Known], item: MemoryItem) -> float | None:
    """Return the best similarity over every live memory of the item's scope and kind (None: no overlap)."""
    target = shingles(item.content)
    scores = [shingle_similarity(shingles(m.content), target) for m in pool
              if m.scope == item.scope and m.kind == item.kind]
    best = max(scores, default=0.0)
    return best if best > 0 else None


@settings(max_examples=300, deadline=None)
@given(stored=st.lists(st.tuples(TEXTS, KINDS), max_size=25), text=TEXTS, kind=KINDS,
       floor=st.floats(min_value=0.5, max_value=1.0))
def test_nearest_is_the_best_memory_reaching_the_floor(stored: list[tuple[str, str]], text: str, kind: str,
                                                       floor: float) -> None:
    loaded = [Known(f"m{i:03d}", content, "session", kind_, None, 1)  # type: ignore[arg-type]
              for i, (content, kind_) in enumerate(stored)]
    pool = Pool(cast(MemoryRepository, None), "t", loaded)
    item = MemoryItem(kind=kind, content=text)  # type: ignore[arg-type]
    found = pool.nearest(item, floor)
    best = brute_force(loaded, item)
    if best is None or best < floor:
        assert found is None
        return
    assert found is not None
    score, memory = found
    assert score == best
    assert memory.kind == kind and shingle_similarity(shingles(memory.content), shingles(text)) == best
