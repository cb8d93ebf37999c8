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
Filters are the store's own Filter objects, evaluated by lite/predicate.py, so both paths select the same rows.
"""

from __future__ import annotations

import itertools
import math
import threading
from array import array
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np

from acn.common.models import Memory
from acn.storage.database.base import Filter, Record
from acn.storage.database.lite.dense_rows import DenseRows, dense_rows_of, inner_products, unit_vector
from acn.storage.database.lite.index_rows import (
    AS_STORED,
    AT,
    CONTENT,
    CREATED,
    FILTERABLE,
    KIND,
    MISSING,
    REPEATED,
    ROW_FIELDS,
    VALID_TO,
    Row,
    bm25_scores,
    by_id,
    distinct_top,
    place_of,
    room,
    row_client_id,
    row_memory,
    tested,
    top_slots,
)
from acn.storage.database.lite.predicate import read_fields, tuple_predicate
from acn.storage.database.memory_rows import (
    EMBEDDED_FIELD,
    to_record,
    with_client_id,
)
from acn.text.terms import bm25_tokens

K1 = 1.2
B = 0.75
# What one row costs in memory besides its text and vector, measured with tracemalloc (tests/test_local_index.py
# holds nbytes to it): its stored fields as one tuple (strings that repeat, such as kinds, scopes and agents, held
# once per index), its key in the id map, its posting entries (8 bytes a term, in arrays), its length, text hash
# and creation time in arrays, a byte in each cached filter mask. A Memory is built only for the rows a read
# returns (the top hits of a search, a page of rows). Before (a Memory, a dict of scalar fields and a Counter of
# terms per row) it was ~3,900 bytes: a namespace of 100,000 rows did not fit the read cache's 256 MB.
ROW_BYTES = 700
# The Memory objects built for reads (a search's hits, a page) are kept for the next read of the same rows, up to
# this many an index (the least recently read out first: first in, first out rebuilt a row every turn finds): assemble
# reads the same standing rows and many of the same hits turn after turn (at 10k rows in one namespace, building them
# again each time tripled its median). MEMORY_BYTES is what one holds (tracemalloc, a short memory), in nbytes.
BUILT_ROWS = 2048
MEMORY_BYTES = 1500
# Filters whose matching rows are kept as a bit mask (one per namespace and kind set a caller asks with).
CACHED_MASKS = 32
CACHED_PAGES = 32  # select_page answers kept per index (see LocalIndex._pages)


class LocalIndex:
    """BM25 and cosine search over a set of stored rows, kept current by `put` (thread-safe)."""

    def __init__(self, dim: int) -> None:
        self._lock = threading.Lock()
        self._dim = dim
        self._slots: dict[str, int] = {}  # the row's id as put (the stored key) -> slot
        self._rows: list[Row] = []
        self._interned: dict[Any, Any] = {}
        # Per term, its posting as one int32 array of (slot, term frequency) pairs, scored in numpy without a copy.
        self._postings: dict[str, array[int]] = {}
        self._total_length = 0
        self._chars = 0  # characters of the texts held, for nbytes
        self._lengths = np.zeros(0, dtype=np.float64)
        # Per slot, whether its text is tokenized (posted): a replaced row's postings are found again from its text.
        self._posted = np.zeros(0, dtype=np.bool_)
        # One hash per text, per slot: a distinct search keeps one copy of a text (see distinct_top). A 64-bit
        # hash: two different texts of one session sharing one is a chance of ~1e-9 at 200,000 rows.
        self._text_ids = np.zeros(0, dtype=np.int64)
        self._created = np.zeros(0, dtype=np.int64)  # created_at per slot, for ordered reads (select_page)
        self._vectors = np.zeros((0, dim), dtype=np.float32)
        # Slots written since the index was built, in order: a cached mask re-reads only those.
        self._changes: array[int] = array("i")
        self._masks: dict[Hashable, tuple[int, bytearray]] = {}
        # The vectors a dense filter that leaves rows out allows, copied once per state of the index (one filter's;
        # `_writes` counts every put, _changes restarts); rows added after them extend it in place (DenseRows). A
        # filter that allows every row needs no copy (dense_rows.dense_rows_of).
        self._writes = 0
        self._dense_rows: DenseRows | None = None
        # Slots whose text is not tokenized yet: a write returns without segmenting its text (jieba takes ~5 ms
        # for a 3 KB tool result); index_pending does it off the request path, or the next text search does.
        self._pending: set[int] = set()
        # Held by the one thread tokenizing them: a search that needs them waits for its pass instead of repeating it.
        self._tokenizing = threading.Lock()
        self._built: OrderedDict[int, tuple[Row, Memory]] = OrderedDict()  # slot -> (its row, its Memory): BUILT_ROWS
        # The last pages select_page answered, each with the write count it was read at: a user's index is read
        # by every conversation of the user with the same filters (memory_rows.for_user_rows), so a new
        # conversation's standing memories and superseded values cost no pass over the user's rows.
        self._pages: OrderedDict[Hashable, tuple[int, list[Memory]]] = OrderedDict()
        # (session id, turn) -> slots, made on the first at_places call and kept by every put after it: a user's
        # archive of all their conversations answers "the messages around this hit" without a pass over its rows.
        self._places: dict[tuple[Any, Any], list[int]] | None = None

    def __len__(self) -> int:
        return len(self._rows)

    def nbytes(self) -> int:
        """Return an estimate of the memory the index holds: ROW_BYTES a row plus its text, and its vector; the
        Memory objects kept for reads, and the vectors a dense filter allows, copied out."""
        dense_rows = self._dense_rows
        copied = dense_rows.buffer.nbytes if dense_rows is not None else 0
        return len(self._rows) * (ROW_BYTES + 4 * self._dim) + 2 * self._chars + MEMORY_BYTES * len(self._built) \
            + copied

    def pending(self) -> int:
        """Return how many rows still wait for their text to be tokenized."""
        with self._lock:
            return len(self._pending)

    def put(self, memory: Memory, record: Record, *, tokenize: bool = True) -> None:
        """Add a row or replace the row with the same id (record: the store row, or part of it, the rest taken
        from the memory; `dense` if configured).

        With tokenize=False the text is tokenized later: by index_pending, or at the latest by the next
        search_text. Filters and dense search see the row at once.
        """
        full = record if AT.keys() - {EMBEDDED_FIELD} <= record.keys() else \
            {**to_record(memory, str(record.get("tenant", "")), None), "id": memory.id, **record}
        self.put_row(full, tokenize=tokenize)

    def put_row(self, record: Record, *, tokenize: bool = True) -> None:
        """Add a store row (every field of OUTPUT_FIELDS; `dense` if configured) or replace the row with its id."""
        vector = unit_vector(record.get("dense"), self._dim)
        with self._lock:
            row = self._compact(record)
        terms = Counter(bm25_tokens(row[CONTENT])) if tokenize else None
        with self._lock:
            self._place(row, terms, vector)

    def _compact(self, record: Record) -> Row:
        """Return the row's tuple: float fields as the store holds them (float32), repeated values held once, an
        empty document as None (called with the lock held)."""
        values = []
        for field in ROW_FIELDS:
            value = record.get(field, MISSING)
            if value is MISSING:
                values.append(value)
                continue
            if isinstance(value, float):
                value = float(np.float32(value))  # see stored_row
            if field == "doc":
                value = value if value and any(value.values()) else None
            elif field in REPEATED:
                value = self._interned.setdefault(value, value)
            values.append(value)
        return tuple(values)

    def subset(self, where: Filter) -> LocalIndex:
        """Return a new index of this one's rows that match the filter, their texts as tokenized as here."""
        with self._lock:
            mask = self._mask(where)
            picked = [(self._rows[slot], bool(self._posted[slot]), self._vectors[slot] if self._dim else None)
                      for slot in np.flatnonzero(np.frombuffer(mask, dtype=np.uint8)).tolist()]
        copy = LocalIndex(self._dim)
        for row, posted, vector in picked:
            terms = Counter(bm25_tokens(row[CONTENT])) if posted else None
            with copy._lock:
                copy._place(copy._compact(dict(zip(ROW_FIELDS, row, strict=True))), terms, vector)
        return copy

    def _place(self, row: Row, terms: Counter[str] | None, vector: np.ndarray | None) -> None:
        """Add the row or replace the row with its id (called with the lock held)."""
        key = str(row[0])
        slot = self._slots.get(key)
        content = row[CONTENT]
        if slot is None:
            slot = len(self._rows)
            self._slots[key] = slot
            self._rows.append(row)
            self._grow(slot)
            if self._places is not None:  # a row's id fixes its place: a replaced row keeps its slot's
                self._places.setdefault(place_of(row), []).append(slot)
        else:
            old = self._rows[slot][CONTENT]
            if old == content and self._posted[slot] and terms is None:
                terms = _KEEP  # the same text, already posted (a vector filled, a supersede): postings stay
            else:
                self._unpost(slot, old)
            self._chars -= len(old)
            self._rows[slot] = row
        self._chars += len(content)
        self._text_ids[slot] = hash(content)
        self._created[slot] = row[CREATED] if isinstance(row[CREATED], int) else 0
        if terms is None:
            self._pending.add(slot)
        elif terms is not _KEEP:
            self._post(slot, terms)
        if self._dim:
            self._vectors[slot] = vector
        self._changes.append(slot)
        self._writes += 1
        if len(self._changes) > 4 * len(self._rows) + 1024:  # masks rebuild from scratch; the log restarts
            self._changes = array("i")
            self._masks.clear()
            self._dense_rows = None  # it reads the slots changed since it was made from the log

    def _grow(self, slot: int) -> None:
        self._lengths = room(self._lengths, slot)
        self._posted = room(self._posted, slot)
        self._text_ids = room(self._text_ids, slot)
        self._created = room(self._created, slot)
        if self._dim:
            self._vectors = room(self._vectors, slot)

    def index_pending(self, at_most: int | None = None) -> int:
        """Tokenize the rows written with tokenize=False (outside the lock: searches go on meanwhile); with
        `at_most`, only that many. Return how many were tokenized. One thread at a time: a restart's first search
        and the background tokenizer segmented the same 8k texts side by side, twice the jieba work (issue 47)."""
        with self._tokenizing:
            with self._lock:
                work = [(slot, self._rows[slot]) for slot in itertools.islice(self._pending, at_most)]
            done = [(slot, row, Counter(bm25_tokens(row[CONTENT]))) for slot, row in work]
            with self._lock:
                for slot, row, terms in done:
                    if slot in self._pending and self._rows[slot] is row:  # not replaced meanwhile
                        self._pending.discard(slot)
                        self._post(slot, terms)
        return len(done)

    def search_text(self, text: str, where: Filter, limit: int, *,
                    distinct: bool = False) -> list[tuple[Memory, float]]:
        """Return up to `limit` rows matching the filter, by BM25 score for the text (only rows scoring > 0).

        With `distinct`, one row per text: the best-scoring copy, the newest of equally scoring ones.
        """
        query = Counter(bm25_tokens(text))
        self.index_pending()
        with self._lock:
            if not query or not self._rows:
                return []
            count = len(self._rows)
            norm = K1 * (1 - B + B * self._lengths[:count] / (self._total_length / count or 1.0))
            matched = [(np.frombuffer(posting, dtype=np.int32), repeats) for term, repeats in query.items()
                       if (posting := self._postings.get(term))]
            scores = bm25_scores([(posting, repeats * math.log(1 + (count - len(posting) // 2 + 0.5) /
                                                               (len(posting) // 2 + 0.5)))
                                  for posting, repeats in matched], count, norm, K1)
            del matched  # the postings' buffers are released: a later write may grow them
            scores *= np.frombuffer(self._mask(where), dtype=np.uint8)
            if distinct:
                positive = np.flatnonzero(scores > 0)
                top = distinct_top(positive, scores[positive], limit, self._text_ids, tied=True)
            else:
                top = top_slots(scores, limit, tied=True)
            return list(zip(self._memories(top), scores[top].tolist(), strict=True))

    def search_dense(self, vector: list[float], where: Filter, limit: int, *,
                     distinct: bool = False) -> list[tuple[Memory, float]]:
        """Return up to `limit` rows matching the filter, by cosine similarity to the vector (`distinct`: as in
        search_text)."""
        query = unit_vector(vector, self._dim)
        with self._lock:
            if not self._dim or not self._rows:
                return []
            allowed, vectors = self._allowed_vectors(where)
            if not len(allowed):
                return []
            scores = inner_products(vectors, query)
            if distinct:
                top = distinct_top(allowed, scores, limit, self._text_ids)
                at = np.searchsorted(allowed, top)  # allowed is ascending: where each picked slot's score is
                values = scores[at].tolist()
            else:
                order = np.argsort(-scores, kind="stable")[:limit] if len(allowed) <= limit else \
                    np.argpartition(-scores, limit - 1)[:limit]
                order = order[np.argsort(-scores[order], kind="stable")]
                top, values = allowed[order].tolist(), scores[order].tolist()
            return [(memory, float(score)) for memory, score in zip(self._memories(top), values, strict=True)]

    def _allowed_vectors(self, where: Filter) -> tuple[np.ndarray, np.ndarray]:
        """Return the slots the filter allows and their vectors, in slot order (called with the lock held): the same
        array `self._vectors[allowed]` gave each search before, so every score is the same to the bit (a product over
        the whole matrix, then indexed, is not: BLAS sums in another order)."""
        key = where.cache_key()
        kept = self._dense_rows
        if kept is not None and kept.key == key and kept.writes == self._writes:
            return kept.allowed, kept.buffer[:len(kept.allowed)]
        allowed = np.flatnonzero(np.frombuffer(self._mask(where), dtype=np.uint8))
        self._dense_rows, vectors = dense_rows_of(kept, key, self._writes, self._changes, allowed, self._vectors,
                                                  len(self._rows))
        return allowed, vectors

    def at_places(self, places: Iterable[tuple[str, int]]) -> list[Memory]:
        """Return the live archived messages at these (session id, turn) places, in the order they were put."""
        with self._lock:
            if self._places is None:
                self._places = {}
                for slot, row in enumerate(self._rows):
                    self._places.setdefault(place_of(row), []).append(slot)
            rows = self._rows
            slots = sorted(slot for place in set(places) for slot in self._places.get(place, ())
                           if rows[slot][KIND] == "turn" and not rows[slot][VALID_TO])
            return self._memories(slots)

    def select(self, where: Filter) -> list[Memory]:
        """Return every row matching the filter, in the order they were first put."""
        with self._lock:
            picked = [self._rows[slot] for slot in self._matching(where)]
        return list(map(row_memory, picked))

    def select_page(self, where: Filter, *, offset: int, limit: int) -> list[Memory]:
        """Return the rows matching the filter ordered by (created_at, id), from `offset`, at most `limit`: as
        sorting `select` would, with Memory objects built only for the page."""
        key = (where.cache_key(), offset, limit)
        with self._lock:
            kept = self._pages.get(key)
            if kept is not None and kept[0] == self._writes:
                self._pages.move_to_end(key)
                return list(kept[1])
            slots = np.flatnonzero(np.frombuffer(self._mask(where), dtype=np.uint8))
            end = offset + limit
            if len(slots) > end > 0:  # only rows created no later than the end-th are sorted by id as well
                created = self._created[slots]
                bound = np.partition(created, end - 1)[end - 1]
                slots = slots[created <= bound]
            rows = self._rows
            ordered = sorted(slots.tolist(), key=lambda slot: (rows[slot][CREATED], row_client_id(rows[slot])))
            page = self._memories(ordered[offset: offset + limit])
            self._pages[key] = (self._writes, page)
            while len(self._pages) > CACHED_PAGES:
                self._pages.popitem(last=False)
            return list(page)

    def records(self, where: Filter, fields: list[str]) -> list[Record]:
        """Return the rows matching the filter as the store path answers them (query_all: the id the client
        knows; importance and the document as a Memory gives them back), these fields only, in put order."""
        with self._lock:
            picked = [self._rows[slot] for slot in self._matching(where)]
        if not set(fields) <= AS_STORED | {"id"}:
            tenant_of = AT["tenant"]
            return [{field: value for field, value in with_client_id(to_record(row_memory(row), str(row[tenant_of]),
                                                                                None)).items() if field in fields}
                    for row in picked]
        at = [(field, AT[field]) for field in fields]
        return [{field: (row_client_id(row) if field == "id" else row[i]) for field, i in at} for row in picked]

    def _memories(self, slots: list[int]) -> list[Memory]:
        """Return the Memory of each slot's row, built once while the row stays (called with the lock held)."""
        found = []
        for slot in slots:
            row = self._rows[slot]
            built = self._built.get(slot)
            if built is None or built[0] is not row:  # never built, or the row was replaced since
                built = (row, row_memory(row))
                if len(self._built) >= BUILT_ROWS:
                    self._built.popitem(last=False)
                self._built[slot] = built
            else:
                self._built.move_to_end(slot)
            found.append(built[1])
        return found

    def _matching(self, where: Filter) -> list[int]:
        slots: list[int] = np.flatnonzero(np.frombuffer(self._mask(where), dtype=np.uint8)).tolist()
        return slots

    def _mask(self, where: Filter) -> bytearray:
        """Return one byte per slot, 1 where the row matches (called with the lock held)."""
        key = where.cache_key()
        cached = self._masks.get(key)
        if cached is not None and cached[0] == len(self._changes):
            return cached[1]
        matches = tuple_predicate(where, FILTERABLE)
        if cached is None and (listed := by_id(where, matches, self._rows, self._slots)) is not None:
            return listed  # not kept: each successor list is a new filter, and it would push out one that costs more
        if cached is None:
            mask = tested(matches, self._rows, read_fields(where))
        else:
            seen, mask = cached
            mask.extend(bytes(len(self._rows) - len(mask)))
            for slot in self._changes[seen:]:
                mask[slot] = matches(self._rows[slot])
        if key not in self._masks and len(self._masks) >= CACHED_MASKS:
            self._masks.pop(next(iter(self._masks)))
        self._masks[key] = (len(self._changes), mask)
        return mask

    def _post(self, slot: int, terms: Counter[str]) -> None:
        for term, count in terms.items():
            posting = self._postings.get(term)
            if posting is None:
                posting = self._postings[term] = array("i")
            try:
                posting.extend((slot, count))
            except BufferError:  # a search's view of it is still alive (an exception's frame): write a copy
                posting = self._postings[term] = array("i", posting)
                posting.extend((slot, count))
        length = sum(terms.values())
        self._total_length += length
        self._lengths[slot] = length
        self._posted[slot] = True

    def _unpost(self, slot: int, content: str) -> None:
        """Take the slot's entries out of its text's postings (called with the lock held)."""
        if not self._posted[slot]:
            self._pending.discard(slot)
            return
        for term in set(bm25_tokens(content)):  # the tokens the text was posted under (bm25_tokens is pure)
            posting = self._postings.get(term)
            if posting is None:
                continue
            found = np.flatnonzero(np.frombuffer(posting, dtype=np.int32)[0::2] == slot).tolist()
            for at in reversed(found):
                try:
                    del posting[2 * at: 2 * at + 2]
                except BufferError:
                    posting = self._postings[term] = array("i", posting)
                    del posting[2 * at: 2 * at + 2]
            if not posting:
                del self._postings[term]
        self._total_length -= int(self._lengths[slot])
        self._lengths[slot] = 0
        self._posted[slot] = False


_KEEP: Counter[str] = Counter()  # _place: the row's postings stay as they are
