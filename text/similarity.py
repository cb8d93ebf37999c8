"""Near-duplicate detection for Chinese and English: Dice similarity of character bigrams."""

from __future__ import annotations

import re
import unicodedata

_NOISE = re.compile(r"[\W_]+", re.UNICODE)


def normalise(text: str) -> str:
    """Return text folded for comparison: NFKC (full-width to half-width), lower case, no punctuation."""
    return _NOISE.sub("", unicodedata.normalize("NFKC", text).casefold())


def shingles(text: str) -> frozenset[str]:
    """Return the character bigrams of the normalised text (the single character when it is one long)."""
    folded = normalise(text)
    if len(folded) < 2:
        return frozenset({folded}) if folded else frozenset()
    return frozenset(folded[i : i + 2] for i in range(len(folded) - 1))


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
