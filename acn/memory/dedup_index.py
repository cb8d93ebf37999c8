"""The dedup index of memory_write: live memories by character bigrams, to find an item's nearest in one scope and kind.

One of three near-duplicate engines, each kept for a reason of its own: text.similarity.PrefixFilter joins one list
with itself once (edit_context's dedupe, all pairs, nothing kept); compaction.statements.NearIndex compares short
statements that must also hold the same numbers, in conversation order; this one is incremental (a namespace's
memories indexed once, then items added and removed as a batch writes), numpy-backed and exact at 100k memories.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from acn.common.models import Memory, MemoryKind
from acn.text.byte_cache import TEXT_CACHE, items_bytes
from acn.text.numbers import key_values
from acn.text.similarity import LONG_TEXT_CHARS, normalise


@dataclass(frozen=True, slots=True)
class Known:
    """What dedup needs of a stored memory; the full row is read only for the few that change."""

    id: str
    content: str
    scope: str
    kind: MemoryKind
    key: str | None
    version: int


KNOWN_FIELDS = ["id", "content", "scope", "kind", "key", "version"]
# DedupIndex.nearest leaves the item's longest postings uncounted: this many fewer than prefix filtering allows
# (fewer uncounted let fewer slots through to the exact count; 6–8 measured best, 1.5–2× faster than counting every
# posting at 100k memories, bench/results/namespace.md). An entry gathered for that exact count costs about
# OVERLAP_COST entries counted.
SKIP_MARGIN = 8
OVERLAP_COST = 4
SKIP_FROM = 16_384  # posting entries below which counting them all is cheaper (numpy's fixed costs, measured)


def numbers_conflict(old: str, new: str) -> bool:
    """Return True when the new text drops a number of the old one: a different fact, not an update.

    "订单 A0001" and "订单 A0002" are textually near-identical but are two orders; an update may add
    detail ("张江路100号" → "张江路100号3楼") but never silently replace a value.
    """
    return not key_number_values(old) <= key_number_values(new)


@TEXT_CACHE.cached(items_bytes)
def key_number_values(text: str) -> frozenset[str]:
    """Return the values of the text's key numbers. Kept (bounded by bytes): a batch asks it of the same texts when
    it chooses what to read (Pool.prefetch) and again when it decides each item (write.write_item)."""
    return frozenset(key_values(text))


def known(memory: Memory | dict[str, Any]) -> Known:
    """Return the dedup view of a memory or of a light store row."""
    if isinstance(memory, Memory):
        return Known(memory.id, memory.content, memory.scope, memory.kind, memory.key, memory.version)
    return Known(memory["id"], memory["content"], memory["scope"], memory["kind"], memory["key"] or None,
                 int(memory["version"]))


def bigram_codes(text: str) -> tuple[int, ...]:
    """Return the text's bigrams (text.similarity.shingles) as ints, ascending, each once: a bigram's two code points
    of 21 bits each, the one character of a one-character text as its code point shifted alike.

    Kept (bounded by bytes) for texts up to LONG_TEXT_CHARS: a batch asks it of each item when it prefetches, when
    it decides the item and when it adds it, and of the memories it compares an item with.
    """
    return _bigram_codes_cached(text) if len(text) <= LONG_TEXT_CHARS else _bigram_codes(text)


def _bigram_codes(text: str) -> tuple[int, ...]:
    folded = normalise(text)
    if len(folded) < 2:
        return (ord(folded) << 21,) if folded else ()
    return tuple(sorted({(ord(a) << 21) | ord(b) for a, b in zip(folded, folded[1:], strict=False)}))


def codes_bytes(codes: tuple[int, ...]) -> int:
    """Bytes a tuple of bigram codes holds, its ints (42-bit: 32 bytes each) included."""
    return sys.getsizeof(codes) + 32 * len(codes)


_bigram_codes_cached = TEXT_CACHE.cached(codes_bytes)(_bigram_codes)


# Odd 64-bit constants of splitmix64's finaliser: a bigram set's hash is the sum of its codes mixed by it.
MIX_1, MIX_2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mixed(codes: np.ndarray) -> np.ndarray:
    """Return the codes (int64) scrambled so that their sum (mod 2**64, order free) hashes the bigram set."""
    x = codes.astype(np.uint64)
    x = (x ^ (x >> np.uint64(30))) * MIX_1
    x = (x ^ (x >> np.uint64(27))) * MIX_2
    return x ^ (x >> np.uint64(31))


def set_hash(codes: Sequence[int]) -> int:
    """Return the hash of one bigram set (its codes, bigram_codes): the same as DedupIndex.add_all computes at once."""
    return int(mixed(np.array(codes, dtype=np.int64)).sum(dtype=np.uint64)) if codes else 0


# Fibonacci hashing (Knuth): a code times an odd 64-bit constant, its top bits the bucket. The k-th constant tried is
# the golden ratio's times 2k + 1; a table twice the square of the set's size is free of collisions with odds of
# about 1 − 1/4 (birthday bound), so one of a few tries almost always is.
GOLDEN = 0x9E3779B97F4A7C15
TABLE_TRIES = 8
TABLE_MAX_BITS = 16  # larger sets (texts of over ~180 bigrams) are looked up by binary search


def member_of(codes: tuple[int, ...]) -> Callable[[np.ndarray], np.ndarray]:
    """Return a test of which of an array of codes (int64) are among these: by a collision-free hash table of
    them, one multiply and one gather a code (~7× faster than a binary search into them at ~10k codes, measured),
    or, when no table of at most 2**TABLE_MAX_BITS buckets is collision-free, by binary search. Codes: ascending,
    each once (bigram_codes)."""
    if not codes:
        return lambda found: np.zeros(len(found), dtype=bool)
    wanted = np.array(codes, dtype=np.int64)
    bits = max(6, (2 * len(wanted) ** 2).bit_length())
    if bits <= TABLE_MAX_BITS:
        shift = np.uint64(64 - bits)
        table = np.empty(1 << bits, dtype=np.int64)
        for k in range(TABLE_TRIES):
            multiplier = np.uint64((GOLDEN * (2 * k + 1)) % (1 << 64))
            buckets = ((wanted.view(np.uint64) * multiplier) >> shift).astype(np.intp)
            table.fill(-1)  # no code is negative: an empty bucket holds none
            table[buckets] = wanted
            if (table[buckets] == wanted).all():  # no two codes share a bucket (else one overwrote the other)
                return lambda found: table[((found.view(np.uint64) * multiplier) >> shift).astype(np.intp)] == found
    return lambda found: wanted[np.minimum(np.searchsorted(wanted, found), len(wanted) - 1)] == found


class DedupIndex:
    """The live memories of a namespace by slot, with postings of character bigrams and a map of keys.

    Exact at any size: `nearest` returns what comparing the item with every live memory of its scope and kind
    would (tests/test_memory_write_pool.py checks it against that definition). The postings of the item's bigrams
    are counted at once (numpy): a slot's count is its overlap with the item, so its Dice follows from the two
    sizes with no set compared. Bigrams are ints (bigram_codes); postings are arrays of int32 slots (4 bytes an entry:
    a 100k-memory namespace's index is tens of MB, not the hundreds a set of ids per bigram takes); a changed
    memory gets a new slot and its old one is marked dead (updates are rare next to adds; a reload starts clean).
    A memory with the item's very bigram set (Dice 1, an exact duplicate most often) is found by the set's hash,
    with no posting counted.
    """

    def __init__(self) -> None:
        self.slots: list[Known | None] = []
        self.slot_of: dict[str, int] = {}
        self.sizes = array("i")  # bigrams per slot
        self.alive = bytearray()  # 1 per live slot
        self.groups: dict[tuple[str, str], dict[int, array[int]]] = {}  # (scope, kind) -> bigram -> slots
        self.keyed: dict[tuple[str, str, str], set[str]] = {}
        # (scope, kind) -> hash of a bigram set (set_hash) -> the slot, or the ascending slots, holding that hash
        self.same_set: dict[tuple[str, str], dict[int, int | list[int]]] = {}
        # Each slot's own bigrams in one flat array, from starts[slot], sizes[slot] long: the exact overlap of the
        # few slots `nearest` lets through, without counting the longest postings.
        self.codes = array("q")
        self.starts = array("q")
        self.chars = 0  # content characters held, for the byte estimate
        self.entries = 0  # posting entries

    def __len__(self) -> int:
        return len(self.slot_of)

    def nbytes(self) -> int:
        """Return an estimate of the memory the index holds (the read cache's byte budget counts it)."""
        return 288 * len(self.slots) + 2 * self.chars + 12 * self.entries + 150 * sum(map(len, self.groups.values()))

    def get(self, memory_id: str) -> Known | None:
        slot = self.slot_of.get(memory_id)
        return None if slot is None else self.slots[slot]

    def live(self) -> list[Known]:
        return [m for m in self.slots if m is not None]

    def add(self, memory: Known) -> None:
        if self.get(memory.id) == memory:  # read again unchanged (a shared pool's update): nothing to do
            return
        self.remove(memory.id)
        codes = bigram_codes(memory.content)
        slot = len(self.slots)
        self._slot(memory, len(codes), len(self.codes))
        self.codes.extend(codes)
        self._same_set((memory.scope, memory.kind), set_hash(codes), slot)
        postings = self.groups.get((memory.scope, memory.kind))
        if postings is None:
            postings = self.groups[(memory.scope, memory.kind)] = {}
        for code in codes:
            posting = postings.get(code)
            if posting is None:
                postings[code] = posting = array("i")
            posting.append(slot)

    def _same_set(self, group: tuple[str, str], key: int, slot: int) -> None:
        hashes = self.same_set.get(group)
        if hashes is None:
            hashes = self.same_set[group] = {}
        held = hashes.get(key)
        if held is None:
            hashes[key] = slot
        elif isinstance(held, int):
            hashes[key] = [held, slot]
        else:
            held.append(slot)

    def _slot(self, memory: Known, size: int, start: int) -> None:
        self.slot_of[memory.id] = len(self.slots)
        self.slots.append(memory)
        self.sizes.append(size)
        self.starts.append(start)
        self.alive.append(1)
        self.chars += len(memory.content)
        self.entries += size
        if memory.key:
            self.keyed.setdefault((memory.scope, memory.kind, memory.key), set()).add(memory.id)

    def add_all(self, memories: list[Known]) -> None:
        """Add memories as `add` would one by one, the bigrams of all computed at once (a 100k-memory load: ~1 s
        less than one by one). Into an empty index, of distinct ids; otherwise one by one."""
        if self.slots or len({m.id for m in memories}) != len(memories) or len(memories) >= 1 << 21:
            for memory in memories:
                self.add(memory)
            return
        if not memories:
            return
        folded = [normalise(m.content) for m in memories]  # as shingles() folds
        lengths = np.fromiter(map(len, folded), dtype=np.int64, count=len(folded))
        chars = np.frombuffer("".join(folded).encode("utf-32-le", "surrogatepass"), dtype=np.uint32).astype(np.int64)
        ends = np.cumsum(lengths)
        row_of = np.repeat(np.arange(len(folded)), lengths)
        starts_pair = np.ones(len(chars), dtype=bool)  # a character followed by one of the same text
        starts_pair[ends[lengths > 0] - 1] = False
        at = np.flatnonzero(starts_pair)
        single = np.flatnonzero(lengths == 1)  # a one-character text: the character itself
        rows = np.concatenate((row_of[at], single))
        codes = np.concatenate(((chars[at] << 21) | chars[at + 1], chars[ends[single] - 1] << 21))
        # By text, then bigram, each once (a text's bigrams are a set): one int64 key, rows < 2^21, codes < 2^42.
        keys = np.sort((rows << 42) | codes)
        keys = keys[np.concatenate((keys[:1] == keys[:1], keys[1:] != keys[:-1]))]
        rows, codes = keys >> 42, keys & ((1 << 42) - 1)
        sizes = np.bincount(rows, minlength=len(memories))
        firsts_of = np.cumsum(sizes) - sizes
        hashes = np.zeros(len(memories), dtype=np.uint64)
        if len(codes):
            hashes[sizes > 0] = np.add.reduceat(mixed(codes), firsts_of[sizes > 0])
        for slot, (memory, size, start, key) in enumerate(zip(memories, sizes.tolist(), firsts_of.tolist(),
                                                               hashes.tolist(), strict=True)):
            self._slot(memory, size, start)
            self._same_set((memory.scope, memory.kind), key, slot)
        self.codes.frombytes(codes.tobytes())
        group_keys = {key: number for number, key in enumerate(dict.fromkeys((m.scope, m.kind) for m in memories))}
        postings_of = [self.groups.setdefault(key, {}) for key in group_keys]
        if not len(codes):
            return
        groups = np.array([group_keys[(m.scope, m.kind)] for m in memories], dtype=np.int64)[rows]
        postings = (groups << 42) | codes
        order = np.argsort(postings, kind="stable")  # by group, then bigram; slots stay ascending (stable)
        postings, entries = postings[order], rows[order].astype(np.int32).tobytes()
        bounds = np.flatnonzero(postings[1:] != postings[:-1]) + 1
        firsts, lasts = [0, *bounds.tolist()], [*bounds.tolist(), len(postings)]
        for first, last, key in zip(firsts, lasts, postings[firsts].tolist(), strict=True):
            postings_of[key >> 42][key & ((1 << 42) - 1)] = array("i", entries[4 * first: 4 * last])

    def remove(self, memory_id: str) -> None:
        slot = self.slot_of.pop(memory_id, None)
        if slot is None:
            return
        old = self.slots[slot]
        self.slots[slot] = None
        self.alive[slot] = 0
        if old is not None:
            self.chars -= len(old.content)
            if old.key:
                ids = self.keyed.get((old.scope, old.kind, old.key))
                if ids is not None:
                    ids.discard(memory_id)
                    if not ids:
                        del self.keyed[(old.scope, old.kind, old.key)]

    def same_key(self, scope: str, kind: str, key: str) -> list[Known]:
        return [m for i in sorted(self.keyed.get((scope, kind, key), ())) if (m := self.get(i)) is not None]

    def nearest(self, scope: str, kind: str, text: str, floor: float) -> tuple[float, Known] | None:
        """Return the most similar live memory of the scope and kind (Dice of bigrams) if it reaches floor; ties go
        to one fixed memory, the greatest id."""
        postings = self.groups.get((scope, kind))
        codes = bigram_codes(text)
        if not codes or postings is None:
            return None
        same = self.same_bigrams(scope, kind, codes) if floor <= 1.0 else None
        if same is not None:
            return 1.0, same
        found = [p for p in map(postings.get, codes) if p is not None]
        # Dice >= floor needs an overlap of at least floor·|A|/(2 − floor) of the item's |A| bigrams.
        needed = max(1, math.ceil(floor * len(codes) / (2 - floor) - 1e-9))
        if len(found) < needed:
            return None
        # Prefix filtering (Chaudhuri et al., 2006): a slot sharing `needed` of the item's bigrams shares at least
        # needed − k of them outside any k. So the k longest postings (the commonest bigrams, most of the entries
        # in a large namespace) are not counted; the slots that reach needed − k on the rest get their overlap
        # counted exactly from their own bigrams.
        found.sort(key=len)
        skip = max(0, needed - 1 - SKIP_MARGIN) if sum(map(len, found)) >= SKIP_FROM else 0
        counted = found[:len(found) - skip]
        tally = np.bincount(np.frombuffer(b"".join(counted), dtype=np.int32))  # join: one copy, no array per posting
        slots = np.flatnonzero(tally >= needed - skip)
        if not len(slots):
            return None
        if skip:
            # Exact overlaps: from the slots' own bigrams, or by counting the rest when that is cheaper.
            rest = found[len(found) - skip:]
            if OVERLAP_COST * len(slots) * len(codes) < sum(map(len, rest)):
                overlap = self.overlap(slots, codes)
            else:
                rest_tally = np.bincount(np.frombuffer(b"".join(rest), dtype=np.int32), minlength=len(tally))
                overlap = tally[slots] + rest_tally[slots]
            slots, overlap = slots[overlap >= needed], overlap[overlap >= needed]
            if not len(slots):
                return None
        else:
            overlap = tally[slots]
        sizes = np.frombuffer(self.sizes, dtype=np.int32)[slots]
        alive = np.frombuffer(self.alive, dtype=np.uint8)[slots]
        scores = np.where(alive == 1, 2.0 * overlap / (len(codes) + sizes), 0.0)
        top = float(scores.max())
        if top < floor or top <= 0:
            return None
        best = max((memory for slot in slots[scores == top].tolist()
                    if (memory := self.slots[slot]) is not None), key=lambda memory: memory.id)
        return top, best

    def same_bigrams(self, scope: str, kind: str, codes: tuple[int, ...]) -> Known | None:
        """Return the live memory of the scope and kind with exactly these bigrams (bigram_codes), the greatest id of
        them if several: `nearest`'s answer whenever one exists (Dice 1, and every other Dice-1 memory has the
        same set)."""
        held = self.same_set.get((scope, kind), {}).get(set_hash(codes))
        if held is None:
            return None
        wanted = list(codes)
        best: Known | None = None
        for slot in [held] if isinstance(held, int) else held:
            memory = self.slots[slot]
            if memory is None or self.sizes[slot] != len(wanted) or (best is not None and memory.id < best.id):
                continue
            start = self.starts[slot]
            if self.codes[start: start + len(wanted)].tolist() == wanted:  # not a collision of hashes
                best = memory
        return best

    def overlap(self, slots: np.ndarray, target: tuple[int, ...]) -> np.ndarray:
        """Return how many of the target's bigrams (bigram_codes) each slot holds (slots: ascending, each with
        bigrams)."""
        lengths = np.frombuffer(self.sizes, dtype=np.int32)[slots].astype(np.int64)
        ends = np.cumsum(lengths)
        # Each slot's bigrams are contiguous from starts[slot]: gather them all at once.
        gathered = np.repeat(np.frombuffer(self.starts, dtype=np.int64)[slots] - (ends - lengths), lengths) \
            + np.arange(int(ends[-1]))
        codes = np.frombuffer(self.codes, dtype=np.int64)[gathered]
        held = np.cumsum(member_of(target)(codes), dtype=np.int64)
        counts: np.ndarray = held[ends - 1] - np.concatenate(([0], held[ends[:-1] - 1]))
        return counts

    def nearest_since(self, scope: str, kind: str, text: str, floor: float,
                      start: int) -> tuple[float, Known] | None:
        """Return what `nearest` would among the slots from `start` on (the few a batch added).

        Their bigrams lie together at the end of the flat array: one membership test of them all. Scores are
        computed as in `nearest` (2.0 · overlap / (|A| + |B|) in float64), so the two compare exactly.
        """
        codes = bigram_codes(text)
        if not codes or start >= len(self.slots):
            return None
        sizes = np.frombuffer(self.sizes, dtype=np.int32)[start:].astype(np.int64)
        held = np.concatenate(([0], np.cumsum(member_of(codes)(np.frombuffer(self.codes, dtype=np.int64)
                                                                [self.starts[start]:]), dtype=np.int64)))
        ends = np.cumsum(sizes)
        scores = 2.0 * (held[ends] - held[ends - sizes]) / (len(codes) + sizes)
        best: tuple[float, Known] | None = None
        for offset in np.flatnonzero((scores >= floor) & (scores > 0)).tolist():
            memory = self.slots[start + offset]
            if memory is not None and memory.scope == scope and memory.kind == kind:
                best = best_of(best, (float(scores[offset]), memory))
        return best

def best_of(a: tuple[float, Known] | None, b: tuple[float, Known] | None) -> tuple[float, Known] | None:
    """Return the better of two nearest answers: the higher score, between equal scores the greater id."""
    if a is None or b is None:
        return a or b
    return b if (b[0], b[1].id) > (a[0], a[1].id) else a
