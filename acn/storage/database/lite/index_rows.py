"""How a row sits in the in-process index (local_index.py): its fields as one tuple, the tests of a filter over many
rows, and the numpy top-k picks a search ends in."""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import numpy as np

from acn.common.models import Memory
from acn.storage.database.base import Filter, Record
from acn.storage.database.lite.predicate import listed_ids
from acn.storage.database.memory_rows import EMBEDDED_FIELD, MEMORY_FIELDS, client_id, from_record

# A row's stored fields, in this order in its tuple; the text is `content`, the vector is kept apart.
ROW_FIELDS = ("id", "content", *MEMORY_FIELDS, EMBEDDED_FIELD)
AT = {field: at for at, field in enumerate(ROW_FIELDS)}
CONTENT = AT["content"]
CREATED = AT["created_at"]
KIND, VALID_TO = AT["kind"], AT["valid_to"]
PLACE_AT = (AT["session_id"], AT["turn_from"])  # where an archived message sits: (session id, turn)
# What a filter reads of a row's tuple: its fields but the text and the JSON document (as stored_row leaves them).
FILTERABLE = tuple(field if field not in ("content", "doc") else "" for field in ROW_FIELDS)
# Fields whose values repeat across rows: held once per index (see _Rows.intern).
REPEATED = ("tenant", "agent_id", "session_id", "user_id", "scope", "kind", "key", "importance", "superseded_by")
MISSING = object()  # a field the row was put without (partial rows in tests, the embedded flag without vectors)
# Fields whose stored value is what to_record(from_record(row)) gives back: a read of them needs no Memory.
AS_STORED = frozenset(ROW_FIELDS) - {"importance", "doc", "id", "turn_to", EMBEDDED_FIELD}
Row = tuple[Any, ...]

# A new filter's mask is tested once per distinct value of the fields it reads (tested) unless more than this share
# of the rows differ there (an id, a time): then row by row.
DISTINCT_SHARE = 0.25
FILTERABLE_AT = {field: at for at, field in enumerate(FILTERABLE) if field}


def tested(matches: Callable[[Row], bool], rows: list[Row], fields: tuple[str, ...]) -> bytearray:
    """Return one byte per row, 1 where it matches: the predicate tested once per distinct combination of the
    fields the filter reads, each row then given its combination's answer.

    Why: a filter's answer for a row depends on those fields alone (predicate.read_fields), and the filters a node
    asks with read a few fields of few values (tenant, agent, session, scope, kind, superseded_by), while the
    predicate, a tree of Python closures, costs ~5-20 us a row. Measured on a warmed namespace of 10k memories, the
    warmer's six filters (acn/assembly/warm.py) took most of its reads' time (and the index's lock meanwhile), and a
    first call that asked a new filter paid one over every row.
    """
    positions = [FILTERABLE_AT[field] for field in fields if field in FILTERABLE_AT]
    project: Callable[[Row], Any] = itemgetter(*positions) if positions else nothing
    try:
        keys = list(map(project, rows))
        firsts = dict(zip(keys, rows, strict=True))  # a row per combination (the last: any gives the same answer)
    except TypeError:  # a value that cannot be a key (a list in a JSON field): row by row
        return bytearray(map(matches, rows))
    if len(firsts) > DISTINCT_SHARE * len(rows) + 16:
        return bytearray(map(matches, rows))
    answers = {key: 1 if matches(row) else 0 for key, row in firsts.items()}
    return bytearray(map(answers.__getitem__, keys))


def by_id(where: Filter, matches: Callable[[Row], bool], rows: list[Row], slots: dict[str, int]) -> bytearray | None:
    """Return the mask `tested` would, for a filter that lists ids (an `id in [...]` it requires): only the listed
    rows are looked up and tested, by id; None for any other filter.

    Why: tested falls back to a row-by-row pass when a filter reads the id, and a superseded value's successors are
    read by id on the next assemble after a supersede (acn/assembly/current.py): ~25 ms over a namespace of 8.4k rows
    (bench.scale's first assemble after a restart, behind a memory_write).
    """
    ids = listed_ids(where)
    if ids is None:
        return None
    mask = bytearray(len(rows))
    for slot in {slots[str(value)] for value in ids if str(value) in slots}:
        mask[slot] = matches(rows[slot])
    return mask


def nothing(row: Row) -> tuple[()]:
    """Return no fields (a filter that reads none)."""
    return ()


def place_of(row: Row) -> tuple[Any, Any]:
    """Return where a row sits among a user's conversations: (session id, turn)."""
    return row[PLACE_AT[0]], row[PLACE_AT[1]]


def row_client_id(row: Row) -> str:
    """Return the id of a held row as the client knows it."""
    return client_id(str(row[0]))


def row_memory(row: Row) -> Memory:
    """Return the memory of a held row, as the store path builds it (from_record)."""
    return from_record({field: value for field, value in zip(ROW_FIELDS, row, strict=True) if value is not MISSING})


def stored_row(record: Record) -> Record:
    """Return the scalar fields of a row as the store holds them, for filters to read.

    A FLOAT field is float32 in the store: 0.3 is stored as 0.30000001192..., so `importance <= 0.3` does not
    match it there and must not here either.
    """
    return {key: float(np.float32(value)) if isinstance(value, float) else value
            for key, value in record.items() if key not in ("content", "doc", "dense")}


def room(array: np.ndarray, slot: int) -> np.ndarray:
    """Return the array, grown (doubling) so that row `slot` exists."""
    if slot < len(array):
        return array
    grown = np.zeros((max(64, 2 * len(array), slot + 1), *array.shape[1:]), dtype=array.dtype)
    grown[: len(array)] = array
    return grown


def top_slots(scores: np.ndarray, limit: int, *, tied: bool = False) -> list[int]:
    """Return the slots of the `limit` best positive scores, best first (ties: lower slot first; `tied`: see
    kth_best)."""
    positive = np.flatnonzero(scores > 0)  # ascending slots: lexsort's last key first, then slot order
    if len(positive) > limit:  # only what reaches the limit-th best score (ties included) needs sorting
        values = scores[positive]
        positive = positive[values >= kth_best(values, limit, tied=tied)]
    best: list[int] = positive[np.lexsort((positive, -scores[positive]))][:limit].tolist()
    return best


def distinct_top(slots: np.ndarray, values: np.ndarray, limit: int, text_ids: np.ndarray, *,
                 tied: bool = False) -> list[int]:
    """Return up to `limit` of the slots, best value first, one per text id (ties: the newest slot first; `tied`:
    see kth_best).

    Only the slots reaching the (DISTINCT_FETCH × limit)-th best value are sorted, unless copies leave fewer
    than `limit` texts among them.
    """
    wanted = DISTINCT_FETCH * limit
    if len(slots) > wanted:
        picked = first_per_text(*leading(slots, values, wanted, tied=tied), text_ids)
        if len(picked) >= limit:
            return picked[:limit]
    return first_per_text(slots, values, text_ids)[:limit]


def leading(slots: np.ndarray, values: np.ndarray, count: int, *, tied: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Return the first `count` slots (and values) in first_per_text's order: best value, then newest slot.

    Those above the count-th best value, and of the ones equal to it the newest. Sorting every slot that reaches
    that value sorted thousands at turn 3,000 of a templated chat, where most matches score the same (issue 47).
    """
    threshold = kth_best(values, count, tied=tied)
    above = np.flatnonzero(values > threshold)
    level = np.flatnonzero(values == threshold)
    need = count - len(above)
    if len(level) > need:
        level = level[np.argpartition(slots[level], len(level) - need)[len(level) - need:]]
    chosen = np.concatenate((above, level))
    return slots[chosen], values[chosen]


def kth_best(values: np.ndarray, count: int, *, tied: bool) -> Any:
    """Return the count-th largest of the values (1 <= count <= len(values)).

    `tied`: values that take few distinct values, as BM25 scores do (sums of a few term weights over texts of like
    lengths: 9 distinct among the 6,973 matches of a query at turn 3,000 of bench.long_session's chat). numpy's
    partition (x86-simd-sort's select) slows down on those to ~4x a whole sort (0.29 against 0.08 ms there); on
    values that rarely repeat (cosine similarities) it is 2-3x faster than sorting. Either way the same value.
    """
    at = len(values) - count
    return np.sort(values)[at] if tied else np.partition(values, at)[at]


def first_per_text(slots: np.ndarray, values: np.ndarray, text_ids: np.ndarray) -> list[int]:
    """Return the slots best value first, one per text id (among equal values the newest slot)."""
    order = np.lexsort((-slots, -values))  # best value first; among equal values the newest slot
    ranked = slots[order]
    _, first = np.unique(text_ids[ranked], return_index=True)
    kept: list[int] = ranked[np.sort(first)].tolist()
    return kept


# A distinct search sorts this many times its limit first (copies of one text rank together).
DISTINCT_FETCH = 3


def bm25_scores(postings: list[tuple[np.ndarray, float]], count: int, norm: np.ndarray, k1: float) -> np.ndarray:
    """Return the BM25 score of every slot below `count`: each (posting, idf) is a term's (slot, tf) int32 pairs
    and its weight, `norm` each slot's k1 · length normalisation.

    The terms' entries are scored in one pass and summed per slot by bincount, which adds a slot's contributions in
    the order given, the terms' order, onto 0.0: the same additions as one `scores[slots] += ...` per term, so the
    same scores to the bit. Why: at turn 3,000 of bench.long_session's chat a query's ~16 terms match ~1,500 rows
    each, and the per-term passes (eight numpy calls a term) took ~0.8 ms of a search's ~1.1 (issue 47).
    """
    if not postings:
        return np.zeros(count, dtype=np.float64)
    pairs = np.concatenate([posting for posting, _ in postings]).reshape(-1, 2)
    slots, tfs = pairs[:, 0], pairs[:, 1].astype(np.float64)
    weights = np.repeat([idf for _, idf in postings], [len(posting) // 2 for posting, _ in postings])
    return np.bincount(slots, weights * tfs * (k1 + 1) / (tfs + norm[slots]), minlength=count)
