"""A learned ranker over focused recall's final candidates (issue 28): features, a tree model, its numpy evaluator.

Focused `assemble` scores its candidates by hand (BM25/dense fusion, coverage, salience, neighbours, hops, the day
weight). The same candidates, described by the features below, are ordered by a LightGBM lambdarank model trained
on the dev halves of bench.recall (`python -m bench.train_ranker`). The model ships as a small JSON file beside
this module; nothing here imports LightGBM: the trees are arrays walked by numpy, all trees at once.

The file is data, not code: it is read once, bounded in size, its structure validated (children after their
parent, feature indices in range, finite numbers) and its feature list must equal FEATURES. A missing, corrupt,
oversized or mismatched file, or a model whose scores come out non-finite, leaves the hand-tuned order as it is.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from acn.retrieval.hybrid_rank import Ranked, memory_terms
from acn.retrieval.intent import wants_many
from acn.retrieval.query_focus import focus
from acn.text.terms import content_terms

log = logging.getLogger("acn.retrieve")

# The feature list, in the model's column order. Change it (names, order or meaning) and FEATURE_VERSION with
# it: a model trained on another list does not load (its file names its features and their version).
FEATURE_VERSION = 1
FEATURES = (
    "score",          # the hand-tuned final score (day weight included) over the best candidate's
    "score_rank",     # log(1 + its position in the hand-tuned order)
    "bm25",           # BM25 normalised by its search's best (0: not found by BM25)
    "dense",          # cosine similarity of the dense leg (0: not found by it, or no embedder)
    "bm25_rank",      # log(1 + its rank by BM25 among the candidates), log(1 + n) when not found by it
    "dense_rank",     # the same for the dense leg
    "relevance",      # the fused relevance part of the hand score
    "coverage",       # IDF-weighted share of the input's content terms it holds (IDF over the candidates)
    "focus_coverage",  # the same for the terms of the input's focus (its questions after a self-correction)
    "overlap",        # how many distinct content terms of the input it holds
    "overlap_share",  # ... over how many the input has
    "importance",     # importance / 10
    "is_turn",        # an archived message (1) or an extracted memory (0)
    "neighbour",      # came in as a neighbour of a hit
    "holder",         # came in as the message holding a retrieved fact
    "hop",            # came from the second hop
    "day_share",      # its day's weight (sum of the day's 3 best direct hits over the best day's); 0 undated
    "same_day_best",  # said on the day of the best candidate
    "asks",           # it is itself a question
    "length",         # log(1 + its characters)
    "query_terms",    # log(1 + the input's distinct content terms)
    "candidates",     # log(1 + how many candidates)
    "hybrid",         # dense vectors present (an embedder is configured)
    "many",           # the input counts or lists (retrieval.intent.wants_many)
)
MODEL_FILE = Path(__file__).with_name("ranker_model.json")
MODEL_FORMAT = "acn-ranker"
# The bounds of a file we accept: a few hundred small trees are tens of kilobytes.
MAX_MODEL_BYTES = 2_000_000
MAX_TREES = 2000
MAX_NODES = 200_000
MAX_DEPTH = 64
DAY_HITS = 3  # a day's weight counts its 3 best direct hits (measured: acn/assembly/recall.py, DAY_WEIGHT)
_QUESTION = re.compile(r"[?？]|[吗呢么][。!！~～]*$")

# bench.recall --ablate ranker sets this False (per process) to measure the hand-tuned order beside the learned.
LEARNED = True
# bench.train_ranker reads every call here (query, candidates, their days, features); None otherwise.
Observer = Callable[[str, list[Ranked], list[str | None], np.ndarray], None]
OBSERVER: Observer | None = None


@dataclass(frozen=True)
class Forest:
    """Trees flattened into arrays, laid out so that a node's two children sit side by side: node i sends a row
    to child[i] when its feature[i] <= threshold[i], else to child[i] + 1. A leaf is its own child with an
    infinite threshold (the rows are finite) and holds value[i]; every walk takes `depth` steps."""

    feature: np.ndarray
    threshold: np.ndarray
    child: np.ndarray
    value: np.ndarray
    roots: np.ndarray
    depth: int

    def predict(self, rows: np.ndarray) -> np.ndarray:
        """Return the sum of the trees' leaves for each row of a finite (n, len(FEATURES)) matrix."""
        count, width = rows.shape
        if count == 0:
            return np.zeros(0)
        flat = np.ascontiguousarray(rows, dtype=np.float64).ravel()
        base = np.arange(count, dtype=np.int64) * width
        node = np.repeat(self.roots[:, None], count, axis=1)  # (trees, rows): all trees walk all rows at once
        for _ in range(self.depth):
            right = flat.take(base + self.feature.take(node)) > self.threshold.take(node)
            node = self.child.take(node) + right
        with np.errstate(over="ignore", invalid="ignore"):  # an overflowing sum is caught by the caller
            total: np.ndarray = self.value.take(node).sum(axis=0)
        return total


class ModelError(ValueError):
    """The model file is not one this code can use."""


def forest(trees: Any) -> Forest:
    """Return the forest of a model file's `trees` (each {feature, threshold, left, right, value}: node i is a
    leaf when feature[i] < 0, else it sends a row left when its feature <= threshold), validated."""
    if not isinstance(trees, list) or not 0 < len(trees) <= MAX_TREES:
        raise ModelError(f"trees: a list of 1 to {MAX_TREES} trees expected")
    features: list[int] = []
    thresholds: list[float] = []
    children: list[int] = []
    values: list[float] = []
    roots, depth = [], 0
    for tree in trees:
        feature, threshold, left, right, value = tree_arrays(tree)
        if len(features) + len(feature) > MAX_NODES:
            raise ModelError("too many nodes")
        # Re-laid out breadth first, each node's children as a pair: (file index, depth) in, new index out.
        roots.append(len(features))
        queue = deque([(0, 0)])
        features.append(0)
        thresholds.append(0.0)
        children.append(0)
        values.append(0.0)
        slot = {0: roots[-1]}
        while queue:
            index, level = queue.popleft()
            here = slot[index]
            depth = max(depth, level)
            if depth > MAX_DEPTH:
                raise ModelError("a tree is too deep")
            if feature[index] < 0:
                features[here], thresholds[here], children[here], values[here] = 0, math.inf, here, value[index]
                continue
            features[here], thresholds[here], children[here] = feature[index], threshold[index], len(features)
            for child in (left[index], right[index]):
                slot[child] = len(features)
                features.append(0)
                thresholds.append(0.0)
                children.append(0)
                values.append(0.0)
                queue.append((child, level + 1))
    return Forest(np.array(features, dtype=np.int64), np.array(thresholds), np.array(children, dtype=np.int64),
                  np.array(values), np.array(roots, dtype=np.int64), depth)


def tree_arrays(tree: Any) -> tuple[list[int], list[float], list[int], list[int], list[float]]:
    """Return a tree's five arrays, checked: numbers of their kind, finite, feature indices in range, each inner
    node's children after it and inside the tree (so every path ends at a leaf and no node is shared)."""
    if not isinstance(tree, dict):
        raise ModelError("a tree is not an object")
    columns: list[list[Any]] = []
    for key in ("feature", "threshold", "left", "right", "value"):
        column = tree.get(key)
        if not isinstance(column, list) or not column or (columns and len(column) != len(columns[0])):
            raise ModelError("a tree's arrays are missing or of different lengths")
        columns.append(column)
    feature, left, right = (_numbers(columns[i], int) for i in (0, 2, 3))
    threshold, value = (_numbers(columns[i], float) for i in (1, 4))
    size = len(feature)
    if size > MAX_NODES:
        raise ModelError("too many nodes")
    reached = [False] * size
    for index in range(size):
        if feature[index] >= len(FEATURES) or not math.isfinite(value[index]):
            raise ModelError("a tree's feature index or value is invalid")
        if feature[index] < 0:
            continue
        if not math.isfinite(threshold[index]) or not all(index < c < size and not reached[c]
                                                          for c in (left[index], right[index])):
            raise ModelError("a tree's structure is invalid")
        if left[index] == right[index]:
            raise ModelError("a tree's structure is invalid")
        reached[left[index]] = reached[right[index]] = True
    return feature, threshold, left, right, value


def _numbers(values: list[Any], kind: type) -> list[Any]:
    allowed = (int,) if kind is int else (int, float)
    if not all(isinstance(v, allowed) and not isinstance(v, bool) for v in values):
        raise ModelError("a tree holds a value that is not a number of its kind")
    if kind is int and any(abs(v) > MAX_NODES for v in values):
        raise ModelError("a tree holds an index out of range")
    try:
        return [kind(v) for v in values]
    except OverflowError as error:  # an integer too large for a float
        raise ModelError("a tree holds a number out of range") from error


def parse_model(text: str | bytes) -> dict[str, Forest]:
    """Return the forests of a model file, by mode ("hybrid": an embedder is configured, "lexical": BM25 only)."""
    if len(text) > MAX_MODEL_BYTES:
        raise ModelError(f"the model file is larger than {MAX_MODEL_BYTES} bytes")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise ModelError("the model file is not JSON") from error
    if not isinstance(data, dict) or data.get("format") != MODEL_FORMAT:
        raise ModelError("not an acn-ranker file")
    if data.get("feature_version") != FEATURE_VERSION or data.get("features") != list(FEATURES):
        raise ModelError("the model was trained on another feature list")
    modes = data.get("modes")
    if not isinstance(modes, dict) or not modes or not set(modes) <= {"hybrid", "lexical"}:
        raise ModelError("modes: hybrid and/or lexical expected")
    return {mode: forest(model.get("trees") if isinstance(model, dict) else None) for mode, model in modes.items()}


def load_model(path: Path = MODEL_FILE) -> dict[str, Forest] | None:
    """Return the model file's forests, or None when it is missing or unusable (logged once per path); parsed
    once per path and process.

    The cache is keyed by the path however the caller names it: cached on the function itself, `load_model()` and
    `load_model(MODEL_FILE)` were two entries, so the start-up warmer's call (no argument) left the first assemble
    to parse the forests again (34 ms of a 67 ms first call in a warmed namespace of 100k).
    """
    return _parsed_model(path)


@lru_cache(maxsize=4)
def _parsed_model(path: Path) -> dict[str, Forest] | None:
    try:
        with path.open("rb") as handle:
            text = handle.read(MAX_MODEL_BYTES + 1)
        return parse_model(text)
    except FileNotFoundError:
        return None
    except (OSError, ModelError) as error:
        log.warning("ranker model %s not used, keeping the hand-tuned order: %s", path, error)
        return None


def features(query: str, candidates: list[Ranked], days: list[str | None]) -> np.ndarray:
    """Return the (len(candidates), len(FEATURES)) feature matrix; `candidates` in the hand-tuned order, `days`
    the day each was said on (None: undated or not a message). Never NaN or infinite."""
    count = len(candidates)
    rows = np.zeros((count, len(FEATURES)))
    if not count:
        return rows
    parts = [c.parts for c in candidates]
    terms = list(dict.fromkeys(content_terms(query)))
    asked = focus(query)
    focus_terms = list(dict.fromkeys(t for q in asked.questions for t in content_terms(q))) if asked.changed else terms
    documents = [memory_terms(c.memory) for c in candidates]
    column = {name: index for index, name in enumerate(FEATURES)}
    scores = np.array([c.score for c in candidates])
    best = float(scores.max())
    rows[:, column["score"]] = scores / best if best > 0 else 0.0
    rows[:, column["score_rank"]] = np.log1p(np.arange(count))
    for leg in ("bm25", "dense"):
        values = np.array([float(p.get(leg, 0.0)) for p in parts])
        rows[:, column[leg]] = values
        order = np.argsort(-values, kind="stable")
        ranks = np.empty(count)
        ranks[order] = np.arange(count)
        rows[:, column[leg + "_rank"]] = np.log1p(np.where(values > 0, ranks, count))
    rows[:, column["relevance"]] = [float(p.get("relevance", 0.0)) for p in parts]
    rows[:, column["coverage"]] = weighted_coverage(terms, documents)
    rows[:, column["focus_coverage"]] = weighted_coverage(focus_terms, documents)
    overlap = np.array([sum(t in d for t in terms) for d in documents], dtype=np.float64)
    rows[:, column["overlap"]] = overlap
    rows[:, column["overlap_share"]] = overlap / len(terms) if terms else 0.0
    rows[:, column["importance"]] = [c.memory.importance / 10 for c in candidates]
    rows[:, column["is_turn"]] = [c.memory.kind == "turn" for c in candidates]
    for flag in ("neighbour", "holder", "hop"):
        rows[:, column[flag]] = [flag in p for p in parts]
    rows[:, column["day_share"]] = day_shares(candidates, days)
    rows[:, column["same_day_best"]] = [d is not None and d == days[0] for d in days]
    rows[:, column["asks"]] = [_QUESTION.search(c.memory.content) is not None for c in candidates]
    rows[:, column["length"]] = np.log1p([len(c.memory.content) for c in candidates])
    rows[:, column["query_terms"]] = math.log1p(len(terms))
    rows[:, column["candidates"]] = math.log1p(count)
    rows[:, column["hybrid"]] = any(float(p.get("dense", 0.0)) > 0 for p in parts)
    rows[:, column["many"]] = wants_many(query)
    return np.nan_to_num(rows, nan=0.0, posinf=0.0, neginf=0.0)


def weighted_coverage(terms: list[str], documents: list[frozenset[str]]) -> np.ndarray:
    """Return, per document, the IDF-weighted share of the terms it holds (as rank.coverage_all)."""
    if not terms:
        return np.zeros(len(documents))
    present = np.array([[t in d for d in documents] for t in terms], dtype=np.float64)
    frequency = present.sum(axis=1)
    count = len(documents)
    weights = np.log(1 + (count - frequency + 0.5) / (frequency + 0.5))
    total = float(weights.sum())
    shares: np.ndarray = weights @ present / total if total else np.zeros(count)
    return shares


def day_shares(candidates: list[Ranked], days: list[str | None]) -> list[float]:
    """Return each candidate's day weight: the sum of its day's DAY_HITS best direct hits over the best day's."""
    per_day: dict[str, list[float]] = {}
    for candidate, day in zip(candidates, days, strict=True):
        if day is not None and "neighbour" not in candidate.parts:
            per_day.setdefault(day, []).append(candidate.score)
    mass = {day: sum(sorted(scores, reverse=True)[:DAY_HITS]) for day, scores in per_day.items()}
    top = max(mass.values(), default=0.0)
    return [mass.get(day, 0.0) / top if day is not None and top > 0 else 0.0 for day in days]


def reordered(query: str, candidates: list[Ranked], days: list[str | None], *, enabled: bool,
              path: Path = MODEL_FILE) -> list[Ranked]:
    """Return the candidates in the learned ranker's order when `enabled` and its model loads, else as given
    (the hand-tuned order). Only the order changes: the candidates and their scores stay."""
    if not candidates or (not enabled and OBSERVER is None):
        return candidates
    model = load_model(path) if enabled and LEARNED else None
    hybrid = any(float(c.parts.get("dense", 0.0)) > 0 for c in candidates)  # as the "hybrid" feature says
    trees = model.get("hybrid" if hybrid else "lexical") if model else None
    if trees is None and OBSERVER is None:
        # No model for these candidates (BM25 only: the package ships none): their features were computed for
        # nothing, ~1 ms of a ~13 ms focused assemble at the plateau of a long chat (issue 47).
        return candidates
    rows = features(query, candidates, days)
    if OBSERVER is not None:
        OBSERVER(query, candidates, days, rows)
    if trees is None:
        return candidates
    learned = trees.predict(rows)
    if not np.all(np.isfinite(learned)):
        log.warning("ranker scores are not finite, keeping the hand-tuned order")
        return candidates
    order = np.lexsort((np.arange(len(candidates)), -learned))  # ties keep the hand-tuned order
    return [candidates[i] for i in order.tolist()]
