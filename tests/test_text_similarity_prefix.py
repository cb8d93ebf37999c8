"""PrefixFilter ranks the bigrams once (a rank lookup per bigram, each prefix computed once): the same prefixes,
postings and candidates as ordering every set by a (count, bigram) key."""

from __future__ import annotations

import math
import random

from acn.text.similarity import PrefixFilter, shingles


def _old_prefixes(sets: list[frozenset[str]], threshold: float) -> list[tuple[str, ...]]:
    """The prefixes as PrefixFilter computed them before the rank table."""
    counts: dict[str, int] = {}
    for shingle_set in sets:
        for shingle in shingle_set:
            counts[shingle] = counts.get(shingle, 0) + 1
    result = []
    for shingle_set in sets:
        if not shingle_set:
            result.append(("",))
            continue
        ordered = sorted(shingle_set, key=lambda shingle: (counts[shingle], shingle))
        overlap = max(1, math.ceil(threshold * len(ordered) / (2 - threshold) - 1e-9))
        result.append(tuple(ordered[: len(ordered) - overlap + 1]))
    return result


def test_prefixes_and_candidates_unchanged() -> None:
    rng = random.Random(5)
    alphabet = "abcdefg订单号已发货的了 12"
    for _ in range(300):
        texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(rng.randint(1, 30))]
        sets = [shingles(text) for text in texts]
        for threshold in (0.5, 0.8, 0.9):
            index = PrefixFilter(sets, threshold)
            old = _old_prefixes(sets, threshold)
            assert index._prefixes == old
            postings: dict[str, list[int]] = {}
            for position, prefix in enumerate(old):
                for shingle in prefix:
                    postings.setdefault(shingle, []).append(position)
            assert index._postings == postings
            for position in range(len(sets)):
                expected = sorted({p for shingle in old[position] for p in postings[shingle] if p > position})
                assert list(index.later(position)) == expected
