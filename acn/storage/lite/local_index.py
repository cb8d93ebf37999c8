"""An in-process search index over one agent's memories, for a store this process alone writes (Lite).

Why: a Milvus Lite search costs 2-4 ms on a small collection and grows with the whole collection (7-10 ms at
10k rows, ~110 ms at 100k) however few rows the filter leaves, and every assemble and retrieve makes one. An
agent reads only its own rows and the tenant's shared ones: a few hundred to a few thousand. Held in memory,
they are ranked in well under a millisecond.

What it must match: the store's ranking. BM25 here is the store's (Milvus BM25: k1 1.2, b 0.75,
idf = ln(1 + (N - df + 0.5) / (df + 0.5)), a query token counted each time it occurs) over the store's
analyzer (text.terms.bm25_tokens); dense similarity is cosine, searched exhaustively as Lite does. Statistics
(N, df, average length) are the group's rather than the whole collection's, so scores differ from Lite's by
a factor per term; tests/test_local_index.py measures how often the top hits differ.
Filters are the store's own Filter objects, evaluated by storage.predicate, so both paths select the same rows.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from acn.common.models import Memory
from acn.storage.base import Filter, Record
from acn.storage.lite.predicate import predicate
from acn.text.terms import bm25_tokens

K1 = 1.2
B = 0.75
# What one row costs in memory besides its text and vector, measured with tracemalloc on short memories: the
# Memory, the row's scalar fields, its term counts and its posting entries.
ROW_BYTES = 3900
# Filters whose matching rows are kept as a bit mask (one per namespace and kind set a caller asks with).
CACHED_MASKS = 32


@dataclass(frozen=True)
class _Doc:
    memory: Memory
    row: Record  # the scalar fields filters read
    terms: Counter[str] | None  # None until the text is tokenized (see index_pending)
    length: int


class LocalIndex:
    """BM25 and cosine search over a set of stored rows, kept current by `put` (thread-safe)."""

    def __init__(self, dim: int) -> None:
        self._lock = threading.Lock()
        self._dim = dim
        self._slots: dict[str, int] = {}
        self._docs: list[_Doc] = []
        self._postings: dict[str, dict[int, int]] = {}
        # Each posting as arrays (slots, term frequencies) for numpy scoring, rebuilt when the term's posting
        # changes: a new message touches a few dozen terms, a search reads a handful.
        self._arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._total_length = 0
        self._chars = 0  # characters of the texts held, for nbytes
        self._lengths = np.zeros(0, dtype=np.float64)
        # One id per distinct text, per slot: a distinct search keeps one copy of a text (see _distinct_top).
        self._text_ids = np.zeros(0, dtype=np.int64)
        self._text_id_of: dict[str, int] = {}
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        # Slots written since the index was built, in order: a cached mask re-reads only those.
        self._changes: list[int] = []
        self._masks: dict[Hashable, tuple[int, bytearray]] = {}
        # The vectors a dense filter allows, copied out once per state of the index: at 10k rows of 512 floats
        # the copy cost as much as the product (a focused assemble searches two or three times between writes).
        # One filter's (a session searches with one); `_writes` counts every put (_changes restarts).
        self._writes = 0
        self._dense_rows: tuple[Hashable, int, np.ndarray, np.ndarray] | None = None
        # Slots whose text is not tokenized yet: a write returns without segmenting its text (jieba takes ~5 ms
        # for a 3 KB tool result); index_pending does it off the request path, or the next text search does.
        self._pending: set[int] = set()

    def __len__(self) -> int:
        return len(self._docs)

    def nbytes(self) -> int:
        """Return an estimate of the memory the index holds: ROW_BYTES a row (the memory, its scalar fields, its
        terms and postings) plus its text, and its vector."""
        dense_rows = self._dense_rows
        copied = dense_rows[3].nbytes if dense_rows is not None else 0
        return len(self._docs) * (ROW_BYTES + 4 * self._dim) + 2 * self._chars + copied

    def pending(self) -> int:
        """Return how many rows still wait for their text to be tokenized."""
        with self._lock:
            return len(self._pending)

    def put(self, memory: Memory, record: Record, *, tokenize: bool = True) -> None:
        """Add a row or replace the row with the same id (record: the store row; `dense` if configured).

        With tokenize=False the text is tokenized later: by index_pending, or at the latest by the next
        search_text. Filters and dense search see the row at once.
        """
        terms = Counter(bm25_tokens(memory.content)) if tokenize else None
        doc = _Doc(memory, stored_row(record), terms, sum(terms.values()) if terms else 0)
        vector = _unit(record.get("dense"), self._dim)
        with self._lock:
            self._place(doc, vector)

    def subset(self, keep: Callable[[Memory], bool]) -> LocalIndex:
        """Return a new index of this one's rows that `keep` accepts, their texts as tokenized as here."""
        with self._lock:
            picked = [(doc, self._vectors[slot] if self._dim else None) for slot, doc in enumerate(self._docs)
                      if keep(doc.memory)]
        copy = LocalIndex(self._dim)
        with copy._lock:
            for doc, vector in picked:
                copy._place(doc, vector)
        return copy

    def _place(self, doc: _Doc, vector: np.ndarray | None) -> None:
        """Add the row or replace the row with its id (called with the lock held)."""
        memory = doc.memory
        slot = self._slots.get(memory.id)
        if slot is None:
            slot = len(self._docs)
            self._slots[memory.id] = slot
            self._docs.append(doc)
        else:
            self._unpost(slot)
            self._chars -= len(self._docs[slot].memory.content)
            self._docs[slot] = doc
        self._chars += len(memory.content)
        self._lengths = _room(self._lengths, slot)
        self._text_ids = _room(self._text_ids, slot)
        self._text_ids[slot] = self._text_id_of.setdefault(memory.content, len(self._text_id_of))
        if doc.terms is None:
            self._pending.add(slot)
        else:
            self._post(slot, doc)
        if self._dim:
            self._vectors = _room(self._vectors, slot)
            self._vectors[slot] = vector
        self._changes.append(slot)
        self._writes += 1
        if len(self._changes) > 4 * len(self._docs) + 1024:  # masks rebuild from scratch; the log restarts
            self._changes.clear()
            self._masks.clear()

    def index_pending(self, at_most: int | None = None) -> int:
        """Tokenize the rows written with tokenize=False (outside the lock: searches go on meanwhile); with
        `at_most`, only that many. Return how many were tokenized."""
        with self._lock:
            work = [(slot, self._docs[slot]) for slot in itertools.islice(self._pending, at_most)]
        if not work:
            return 0
        done = [(slot, doc, Counter(bm25_tokens(doc.memory.content))) for slot, doc in work]
        with self._lock:
            for slot, doc, terms in done:
                if slot in self._pending and self._docs[slot] is doc:  # not replaced meanwhile
                    indexed = replace(doc, terms=terms, length=sum(terms.values()))
                    self._docs[slot] = indexed
                    self._pending.discard(slot)
                    self._post(slot, indexed)
        return len(done)

    def search_text(self, text: str, where: Filter, limit: int, *,
                    distinct: bool = False) -> list[tuple[Memory, float]]:
        """Return up to `limit` rows matching the filter, by BM25 score for the text (only rows scoring > 0).

        With `distinct`, one row per text: the best-scoring copy, the newest of equally scoring ones.
        """
        query = Counter(bm25_tokens(text))
        self.index_pending()
        with self._lock:
            if not query or not self._docs:
                return []
            count = len(self._docs)
            norm = K1 * (1 - B + B * self._lengths[:count] / (self._total_length / count or 1.0))
            scores = np.zeros(count, dtype=np.float64)
            for term, repeats in query.items():
                arrays = self._posting_arrays(term)
                if arrays is None:
                    continue
                slots, tfs = arrays
                idf = repeats * math.log(1 + (count - len(slots) + 0.5) / (len(slots) + 0.5))
                scores[slots] += idf * tfs * (K1 + 1) / (tfs + norm[slots])
            scores *= np.frombuffer(self._mask(where), dtype=np.uint8)
            if distinct:
                positive = np.flatnonzero(scores > 0)
                top = _distinct_top(positive, scores[positive], limit, self._text_ids)
            else:
                top = _top(scores, limit)
            return list(zip([self._docs[slot].memory for slot in top], scores[top].tolist(), strict=True))

    def search_dense(self, vector: list[float], where: Filter, limit: int, *,
                     distinct: bool = False) -> list[tuple[Memory, float]]:
        """Return up to `limit` rows matching the filter, by cosine similarity to the vector (`distinct`: as in
        search_text)."""
        query = _unit(vector, self._dim)
        with self._lock:
            if not self._dim or not self._docs:
                return []
            allowed, vectors = self._allowed_vectors(where)
            if not len(allowed):
                return []
            scores = vectors @ query
            if distinct:
                picked = _distinct_top(allowed, scores, limit, self._text_ids)
                at = np.searchsorted(allowed, picked)  # allowed is ascending: where each picked slot's score is
                return list(zip([self._docs[slot].memory for slot in picked], scores[at].tolist(), strict=True))
            order = np.argsort(-scores, kind="stable")[:limit] if len(allowed) <= limit else \
                np.argpartition(-scores, limit - 1)[:limit]
            order = order[np.argsort(-scores[order], kind="stable")]
            return [(self._docs[int(allowed[i])].memory, float(scores[i])) for i in order]

    def _allowed_vectors(self, where: Filter) -> tuple[np.ndarray, np.ndarray]:
        """Return the slots the filter allows and their vectors, in slot order (called with the lock held).

        The same array `self._vectors[allowed]` gave each search before: the product, and so every score, is the
        same to the bit (a product over the whole matrix, then indexed, is not: BLAS sums in another order).
        """
        key = where.cache_key()
        kept = self._dense_rows
        if kept is not None and kept[0] == key and kept[1] == self._writes:
            return kept[2], kept[3]
        allowed = np.flatnonzero(np.frombuffer(self._mask(where), dtype=np.uint8))
        vectors = self._vectors[allowed]
        self._dense_rows = (key, self._writes, allowed, vectors)
        return allowed, vectors

    def select(self, where: Filter) -> list[Memory]:
        """Return every row matching the filter, in the order they were first put."""
        with self._lock:
            mask = self._mask(where)
            return [doc.memory for doc, keep in zip(self._docs, mask, strict=True) if keep]

    def _posting_arrays(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        arrays = self._arrays.get(term)
        if arrays is None:
            posting = self._postings.get(term)
            if not posting:
                return None
            arrays = (np.fromiter(posting.keys(), dtype=np.int64, count=len(posting)),
                      np.fromiter(posting.values(), dtype=np.float64, count=len(posting)))
            self._arrays[term] = arrays
        return arrays

    def _mask(self, where: Filter) -> bytearray:
        """Return one byte per slot, 1 where the row matches (called with the lock held)."""
        key = where.cache_key()
        cached = self._masks.get(key)
        if cached is not None and cached[0] == len(self._changes):
            return cached[1]
        matches = predicate(where)
        if cached is None:
            mask = bytearray(matches(doc.row) for doc in self._docs)
        else:
            seen, mask = cached
            mask.extend(bytes(len(self._docs) - len(mask)))
            for slot in self._changes[seen:]:
                mask[slot] = matches(self._docs[slot].row)
        if key not in self._masks and len(self._masks) >= CACHED_MASKS:
            self._masks.pop(next(iter(self._masks)))
        self._masks[key] = (len(self._changes), mask)
        return mask

    def _post(self, slot: int, doc: _Doc) -> None:
        for term, count in (doc.terms or {}).items():
            self._postings.setdefault(term, {})[slot] = count
            self._arrays.pop(term, None)
        self._total_length += doc.length
        self._lengths[slot] = doc.length

    def _unpost(self, slot: int) -> None:
        old = self._docs[slot]
        if old.terms is None:
            self._pending.discard(slot)
            return
        for term in old.terms:
            self._arrays.pop(term, None)
            posting = self._postings.get(term)
            if posting is not None:
                posting.pop(slot, None)
                if not posting:
                    del self._postings[term]
        self._total_length -= old.length


def stored_row(record: Record) -> Record:
    """Return the scalar fields of a row as the store holds them, for filters to read.

    A FLOAT field is float32 in the store: 0.3 is stored as 0.30000001192..., so `importance <= 0.3` does not
    match it there and must not here either.
    """
    return {key: float(np.float32(value)) if isinstance(value, float) else value
            for key, value in record.items() if key not in ("content", "doc", "dense")}


def _room(array: np.ndarray, slot: int) -> np.ndarray:
    """Return the array, grown (doubling) so that row `slot` exists."""
    if slot < len(array):
        return array
    grown = np.zeros((max(64, 2 * len(array), slot + 1), *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def _top(scores: np.ndarray, limit: int) -> list[int]:
    """Return the slots of the `limit` best positive scores, best first (ties: lower slot first)."""
    positive = np.flatnonzero(scores > 0)  # ascending slots: lexsort's last key first, then slot order
    if len(positive) > limit:  # only what reaches the limit-th best score (ties included) needs sorting
        values = scores[positive]
        positive = positive[values >= np.partition(values, len(values) - limit)[len(values) - limit]]
    best: list[int] = positive[np.lexsort((positive, -scores[positive]))][:limit].tolist()
    return best


def _distinct_top(slots: np.ndarray, values: np.ndarray, limit: int, text_ids: np.ndarray) -> list[int]:
    """Return up to `limit` of the slots, best value first, one per text id (ties: the newest slot first).

    Only the slots reaching the (DISTINCT_FETCH × limit)-th best value are sorted, unless copies leave fewer
    than `limit` texts among them.
    """
    wanted = DISTINCT_FETCH * limit
    if len(slots) > wanted:
        threshold = np.partition(values, len(values) - wanted)[len(values) - wanted]
        near = values >= threshold
        picked = _first_per_text(slots[near], values[near], text_ids)
        if len(picked) >= limit:
            return picked[:limit]
    return _first_per_text(slots, values, text_ids)[:limit]


def _first_per_text(slots: np.ndarray, values: np.ndarray, text_ids: np.ndarray) -> list[int]:
    order = np.lexsort((-slots, -values))  # best value first; among equal values the newest slot
    ranked = slots[order]
    _, first = np.unique(text_ids[ranked], return_index=True)
    kept: list[int] = ranked[np.sort(first)].tolist()
    return kept


# A distinct search sorts this many times its limit first (copies of one text rank together).
DISTINCT_FETCH = 3


def _unit(vector: Any, dim: int) -> np.ndarray:
    if not dim:
        return np.zeros(0, dtype=np.float32)
    array = np.zeros(dim, dtype=np.float32) if vector is None else np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array
