"""Near-duplicate detection for Chinese and English: Dice similarity of character bigrams."""

from __future__ import annotations

import heapq
import math
import re
import sys
import unicodedata
from bisect import bisect_right
from collections.abc import Iterator

from acn.text.byte_cache import TEXT_CACHE, interned_items_bytes, text_bytes
from acn.text.parts import in_parts, text_parts

_NOISE = re.compile(r"[\W_]+", re.UNICODE)


# Assembly folds the same stored memories on every call: what folding and shingling made is kept in the text
# cache (acn/text/byte_cache.py: ACN_TEXT_CACHE_MB in all, least recently used out first); texts longer than
# LONG_TEXT_CHARS are not kept at all.
LONG_TEXT_CHARS = 100_000


def normalise(text: str) -> str:
    """Return text folded for comparison: NFKC (full-width to half-width), lower case, no punctuation."""
    if in_parts(text):
        # Part by part (acn/text/parts.py): a working-state segment changes a little every turn; folded whole it took
        # ~0.6 ms a turn and left a ~15 KB cache entry no later call asked for. The whole is not kept.
        return "".join(map(_normalise_cached, text_parts(text)))
    return _normalise_cached(text) if len(text) <= LONG_TEXT_CHARS else _normalise(text)


def _normalise(text: str) -> str:
    return _NOISE.sub("", unicodedata.normalize("NFKC", text).casefold())


_normalise_cached = TEXT_CACHE.cached(text_bytes)(_normalise)


def shingles(text: str) -> frozenset[str]:
    """Return the character bigrams of the normalised text (the single character when it is one long)."""
    return _shingles_cached(text) if len(text) <= LONG_TEXT_CHARS else _shingles(text)


def _shingles(text: str) -> frozenset[str]:
    folded = normalise(text)
    if len(folded) < 2:
        return frozenset({folded}) if folded else frozenset()
    return frozenset(sys.intern(folded[i : i + 2]) for i in range(len(folded) - 1))


_shingles_cached = TEXT_CACHE.cached(interned_items_bytes)(_shingles)


def shingle_similarity(a: frozenset[str], b: frozenset[str]) -> float:
    """Return the Dice coefficient of two shingle sets, in [0, 1]; two empty sets are identical."""
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    return 2 * len(a & b) / (len(a) + len(b))


def can_reach(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
    """Return False when set sizes alone rule out reaching threshold (a cheap pre-filter for O(n²) loops)."""
    if not a or not b:
        return threshold <= shingle_similarity(a, b)
    return 2 * min(len(a), len(b)) / (len(a) + len(b)) >= threshold


def similarity(a: str, b: str) -> float:
    """Return how alike two texts are, in [0, 1] (1.0 for texts equal after normalisation)."""
    return shingle_similarity(shingles(a), shingles(b))


class PrefixFilter:
    """Find, for a list of shingle sets, the later sets that may reach a Dice threshold, without comparing pairs.

    Prefix filtering (Chaudhuri et al., 2006; Xiao et al., "Efficient similarity joins", 2008): order every
    bigram by how rare it is; a set of n bigrams shares at least m = ⌈t·n / (2 − t)⌉ bigrams with any set it
    reaches Dice t with, so two such sets always share one bigram among the first n − m + 1 of each. Indexing only
    those prefixes, a message meets the few messages that share a rare bigram with it instead of all of them:
    deduplication stays near-linear where the pairwise scan was quadratic. Empty sets (no letters or digits)
    reach Dice 1.0 with each other only and are kept in a bucket of their own.

    Not merged with memory.dedup_index.DedupIndex or compaction.statements.NearIndex: this is a one-shot self-join of
    one list (edit_context's dedupe), built and dropped per call; the memory index is incremental and kept across
    batches, and compaction's also requires equal numbers, so each would carry the others' costs.
    """

    def __init__(self, sets: list[frozenset[str]], threshold: float) -> None:
        counts: dict[str, int] = {}
        for shingle_set in sets:
            for shingle in shingle_set:
                counts[shingle] = counts.get(shingle, 0) + 1
        # Rarest first, ties by the bigram: one sort of the distinct bigrams ranks them, and each set then sorts by a
        # rank lookup (not a (count, bigram) key built per bigram), its prefix computed once for postings and probes.
        ranked = sorted(counts, key=lambda shingle: (counts[shingle], shingle))
        rank = {shingle: at for at, shingle in enumerate(ranked)}
        self._prefixes = [_prefix(s, rank, threshold) if s else ("",) for s in sets]
        self._postings: dict[str, list[int]] = {}
        for position, prefix in enumerate(self._prefixes):
            for shingle in prefix:
                self._postings.setdefault(shingle, []).append(position)

    def later(self, position: int) -> Iterator[int]:
        """Yield, in increasing order and once each, the positions after `position` that may reach the threshold."""
        streams = []
        for shingle in self._prefixes[position]:
            postings = self._postings[shingle]
            streams.append(iter(postings[bisect_right(postings, position):]))
        previous = -1
        for candidate in heapq.merge(*streams):
            if candidate != previous:
                previous = candidate
                yield candidate


def _prefix(shingle_set: frozenset[str], rank: dict[str, int], threshold: float) -> tuple[str, ...]:
    ordered = sorted(shingle_set, key=rank.__getitem__)
    # The 1e-9 keeps a product that should be an integer from rounding up: a longer prefix is always safe.
    overlap = max(1, math.ceil(threshold * len(ordered) / (2 - threshold) - 1e-9))
    return tuple(ordered[: len(ordered) - overlap + 1])
