"""The dedup pool's near-duplicate lookup against its definition: the best Dice of the same scope and kind."""

from __future__ import annotations

from typing import cast
from unittest.mock import patch

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import acn.memory.dedup_index
from acn.memory.dedup_index import DedupIndex, Known
from acn.memory.items import MemoryItem
from acn.memory.pool import Pool
from acn.storage.repositories.memories import MemoryRepository
from acn.text.similarity import shingle_similarity, shingles

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


def brute_force_best(pool: list[Known], item: MemoryItem, floor: float) -> tuple[float, str] | None:
    """Return (score, id) of the definition's answer: the best Dice reaching floor, ties to the greatest id."""
    target = shingles(item.content)
    scored = [(shingle_similarity(shingles(m.content), target), m.id) for m in pool
              if m.scope == item.scope and m.kind == item.kind]
    best = max((s for s in scored if s[0] > 0 and s[0] >= floor), default=None)
    return best


@settings(max_examples=300, deadline=None)
@given(stored=st.lists(st.tuples(TEXTS, KINDS), max_size=20),
       batch=st.lists(st.tuples(TEXTS, KINDS, st.sampled_from(["add", "update", "close"])), min_size=1, max_size=12),
       floor=st.floats(min_value=0.5, max_value=1.0))
def test_nearest_stays_exact_while_the_batch_changes_the_pool(stored: list[tuple[str, str]],
                                                              batch: list[tuple[str, str, str]], floor: float) -> None:
    # Each item's nearest is found once before the batch (remember_nearest); later items must still get the
    # definition's answer after earlier ones added memories, updated the remembered one or closed it.
    loaded = [Known(f"m{i:03d}", content, "session", kind_, None, 1)  # type: ignore[arg-type]
              for i, (content, kind_) in enumerate(stored)]
    pool = Pool(cast(MemoryRepository, None), "t", loaded)
    items = [MemoryItem(kind=kind, content=text) for text, kind, _ in batch]  # type: ignore[arg-type]
    pool.remember_nearest(items, floor)
    for number, (item, (_, _, action)) in enumerate(zip(items, batch, strict=True)):
        found = pool.nearest(item, floor)
        expected = brute_force_best(pool.index.live(), item, floor)
        assert (None if found is None else (found[0], found[1].id)) == expected
        if action == "add" or found is None:
            pool.index.add(Known(f"n{number:03d}", item.content, "session", item.kind, None, 1))
        elif action == "update":
            old = found[1]
            pool.index.add(Known(old.id, item.content, old.scope, old.kind, None, old.version + 1))
        else:
            pool.index.remove(found[1].id)


LONG_TEXTS = st.text(alphabet="abcdefXY订单号", min_size=6, max_size=40)


@settings(max_examples=300, deadline=None)
@given(stored=st.lists(st.tuples(LONG_TEXTS, KINDS), max_size=30), text=LONG_TEXTS, kind=KINDS,
       floor=st.floats(min_value=0.5, max_value=1.0), margin=st.sampled_from([0, 1, 4]),
       cost=st.sampled_from([0, 10**6]))
def test_nearest_is_exact_when_the_longest_postings_are_not_counted(stored: list[tuple[str, str]], text: str,
                                                                    kind: str, floor: float, margin: int,
                                                                    cost: int) -> None:
    # Long texts over a small alphabet: the item's bigrams outnumber the margin, so the longest postings are skipped
    # and the slots let through are counted from their own bigrams (margin 0: as many skipped as prefix filtering
    # allows, the boundary where a slot sharing exactly `needed` bigrams must still be found). Cost 0: the exact
    # count from the slots' own bigrams; a huge cost: by counting the skipped postings.
    loaded = [Known(f"m{i:03d}", content, "session", kind_, None, 1)  # type: ignore[arg-type]
              for i, (content, kind_) in enumerate(stored)]
    pool = Pool(cast(MemoryRepository, None), "t", loaded)
    pool.index.remove("m000")  # a dead slot stays in the postings and in the flat bigram array
    item = MemoryItem(kind=kind, content=text)  # type: ignore[arg-type]
    with patch.object(acn.memory.dedup_index, "SKIP_MARGIN", margin), patch.object(acn.memory.dedup_index, "OVERLAP_COST", cost), \
            patch.object(acn.memory.dedup_index, "SKIP_FROM", 0):
        found = pool.index.nearest(item.scope, item.kind, item.content, floor)
    assert (None if found is None else (found[0], found[1].id)) == brute_force_best(pool.index.live(), item, floor)


# Texts that fold to nothing, to one character, or change under NFKC and case folding.
ODD_TEXTS = st.one_of(TEXTS, st.text(max_size=12), st.sampled_from(["", "!", "Ａ", "a", "，。", "ﬁ", "ß"]))


def structure(index: DedupIndex) -> tuple[object, ...]:
    """Return what an index holds, slot by slot (each slot's bigrams as a set)."""
    codes = [frozenset(index.codes[index.starts[slot]: index.starts[slot] + index.sizes[slot]])
             for slot in range(len(index.slots))]
    postings = {group: {code: list(slots) for code, slots in postings.items()}
                for group, postings in index.groups.items()}
    same_set = {group: {key: [held] if isinstance(held, int) else held for key, held in hashes.items()}
                for group, hashes in index.same_set.items()}
    return (index.slots, index.slot_of, list(index.sizes), bytes(index.alive), codes, postings, index.keyed,
            index.chars, index.entries, same_set)


@settings(max_examples=300, deadline=None)
@given(memories=st.lists(st.tuples(ODD_TEXTS,
                                   KINDS, st.sampled_from([None, "k1", "k2"])), max_size=25))
def test_an_index_loaded_at_once_is_the_index_built_one_by_one(memories: list[tuple[str, str, str | None]]) -> None:
    # A pool's load computes every text's bigrams at once (add_all, numpy); `add` computes one text's (shingles).
    loaded = [Known(f"m{i:03d}", content, "session", kind, key, 1)  # type: ignore[arg-type]
              for i, (content, kind, key) in enumerate(memories)]
    at_once, one_by_one = DedupIndex(), DedupIndex()
    at_once.add_all(loaded)
    for each in loaded:
        one_by_one.add(each)
    assert structure(at_once) == structure(one_by_one)


def test_skipping_one_posting_more_than_prefix_filtering_allows_would_answer_another_kind() -> None:
    # "abcdefghij" has 9 bigrams; at 0.9 a match needs 8 of them, so at most 7 postings may go uncounted. Skipping 8
    # would let every slot through, the identical memory of another kind included (counted from its own bigrams).
    loaded = [Known("m000", "abcdefghij", "session", "preference", None, 1),
              Known("m001", "abcdefghiXj", "session", "fact", None, 1),  # 8 of the 9 bigrams: Dice 0.84
              Known("m002", "ijklmnop", "session", "fact", None, 1)]  # the ninth
    pool = Pool(cast(MemoryRepository, None), "t", loaded)
    with patch.object(acn.memory.dedup_index, "SKIP_MARGIN", 0), patch.object(acn.memory.dedup_index, "SKIP_FROM", 0), \
            patch.object(acn.memory.dedup_index, "OVERLAP_COST", 0):  # the let-through slots counted from their own bigrams
        assert pool.index.nearest("session", "fact", "abcdefghij", 0.9) is None
        assert pool.index.nearest("session", "fact", "abcdefghiXj", 0.9) == (1.0, loaded[1])


@settings(max_examples=100, deadline=None)
@given(stored=st.lists(st.tuples(TEXTS, KINDS), max_size=20), text=TEXTS, kind=KINDS,
       floor=st.floats(min_value=0.5, max_value=1.0))
def test_a_memory_with_the_items_bigram_set_is_checked_not_trusted_to_its_hash(stored: list[tuple[str, str]],
                                                                               text: str, kind: str,
                                                                               floor: float) -> None:
    # Dice 1 is looked up by the hash of the bigram set; with every set hashing alike, the memories found under the
    # item's hash must still be compared with it (half loaded at once, half added one by one: both hash).
    with patch.object(acn.memory.dedup_index, "mixed", lambda codes: np.zeros(len(codes), dtype=np.uint64)):
        loaded = [Known(f"m{i:03d}", content, "session", kind_, None, 1)  # type: ignore[arg-type]
                  for i, (content, kind_) in enumerate(stored)]
        pool = Pool(cast(MemoryRepository, None), "t", loaded[: len(loaded) // 2])
        for each in loaded[len(loaded) // 2:]:
            pool.index.add(each)
        item = MemoryItem(kind=kind, content=text)  # type: ignore[arg-type]
        found = pool.index.nearest(item.scope, item.kind, item.content, floor)
    assert (None if found is None else (found[0], found[1].id)) == brute_force_best(loaded, item, floor)


@settings(max_examples=300, deadline=None)
@given(text=ODD_TEXTS)
def test_a_texts_bigram_codes_are_its_shingles_as_ints(text: str) -> None:
    codes = {(ord(gram[0]) << 21) | (ord(gram[1]) if len(gram) > 1 else 0) for gram in shingles(text)}
    assert acn.memory.dedup_index.bigram_codes(text) == tuple(sorted(codes))


CODES = st.integers(min_value=0, max_value=(1 << 42) - 1)


@settings(max_examples=300, deadline=None)
@given(wanted=st.sets(CODES, max_size=400), others=st.lists(CODES, max_size=200), tries=st.sampled_from([0, 1, 8]))
def test_membership_by_hash_table_or_binary_search_is_exact(wanted: set[int], others: list[int], tries: int) -> None:
    # No try (tries 0), or sets too large for a table (over ~180 codes), fall back to the binary search; one try
    # often collides for larger sets and falls back too; the others use the table.
    probes = [*sorted(wanted)[::3], *others, *(code ^ 1 for code in sorted(wanted)[::5])]
    with patch.object(acn.memory.dedup_index, "TABLE_TRIES", tries):
        member = acn.memory.dedup_index.member_of(tuple(sorted(wanted)))
    assert member(np.array(probes, dtype=np.int64)).tolist() == [code in wanted for code in probes]
