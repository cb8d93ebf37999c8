"""Train the learned ranker of focused recall (acn/retrieval/learned_ranker.py) on the dev halves of bench.recall.

Run: .venv/bin/python -m bench.train_ranker [--check] [--workers 2] [--vector-cache /tmp/vectors.sqlite]
                                            [--data-cache /tmp/ranker-data.json.gz] [--suites ...] [--budgets ...]

1. Collect: every dev case of the suites (fixed seeds: LoCoMo 0–4, MADial even dialogues, the even seeds of the
   generated suites) is fed to our app (record_turn, ACN_EMBEDDER=use) and each dev question asked through
   focused `assemble` at each budget, with the hand-tuned order (ACN_RANKER=off); the ranker's OBSERVER receives
   the candidates that passed the floor (with their days). A candidate is relevant when it is an evidence message
   (its dia_id) or holds one's text word for word. `--data-cache` keeps the candidates themselves (not their
   features), with each one's tokens and whether the hand-tuned context held it: a changed feature list retrains
   from the same file, and an offline replay of the budget can compare orders without asking again.
2. Features: today's ranker.features of every question that has evidence among its candidates.
3. Train: LightGBM lambdarank, one query group per (question, budget), deterministic (one thread, fixed seed).
4. Export: the trees as arrays (acn/retrieval/ranker_model.json, mode "hybrid"); numbers to 9 significant digits.

The same seeds give the same file: the command says whether the new file differs from the one in the package
(with --check it does not write it and exits 1 when it differs). Test halves are never read here.
"""

from __future__ import annotations

import argparse
import gzip
import json
import multiprocessing
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from acn.common.models import Memory
from acn.retrieval import learned_ranker as ranker
from acn.retrieval.hybrid_rank import Ranked
from acn.text.tokens import load_tokenizer
from bench.progress import progress
from bench.recall import SUITES, Case, Ours, build_cases, data_folder
from bench.scoring import collect_ids, fold
from bench.vector_cache import cached_name

BUDGETS = (1000, 2000, 4000)
SEED = 7
# Small trees, few of them: the numpy walk costs about 5 µs per tree and level for 400 candidates, so 80 trees of
# depth 5 score them in about 2 ms, and the file stays tens of kilobytes (docs/ranker.md).
PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "metric": "ndcg",
    "ndcg_eval_at": [10, 30],
    "lambdarank_truncation_level": 60,
    "learning_rate": 0.1,
    "num_leaves": 15,
    "max_depth": 5,
    "min_data_in_leaf": 200,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "use_missing": False,
    "zero_as_missing": False,
    "num_threads": 1,
    "deterministic": True,
    "force_row_wise": True,
    "seed": SEED,
    "bagging_seed": SEED,
    "feature_fraction_seed": SEED,
    "data_random_seed": SEED,
    "verbosity": -1,
}
ROUNDS = 80
DIGITS = 9


@dataclass(frozen=True)
class Groups:
    """Candidates of every (question, budget): features, labels, group sizes, and each group's suite."""

    rows: np.ndarray
    labels: np.ndarray
    sizes: np.ndarray
    suites: list[str]


@dataclass(frozen=True)
class Asked:
    """One (question, budget) as collected, before features: what ranker.features reads (the query, the
    candidates, their days) and what an offline replay of the budget needs (each candidate's tokens, whether the
    hand-tuned order's context held it, the question's number of evidence messages)."""

    suite: str
    query: str
    budget: int
    candidates: list[Ranked]
    days: list[str | None]
    labels: np.ndarray
    tokens: np.ndarray
    packed: np.ndarray
    evidence: int


Job = tuple[Case, list[int], str, Path, Path | None]


def collect_case(job: Job) -> tuple[str, list[Asked]]:
    """Feed one case to our app and return, per dev question and budget, its candidates as recall saw them."""
    case, budgets, embedder, folder, cache = job
    os.environ["ACN_RANKER"] = "off"
    texts = {line.dia_id: fold(line.content) for line in case.lines}
    tokenizer = load_tokenizer()
    seen: list[tuple[list[Ranked], list[str | None]]] = []

    def observe(query: str, candidates: list[Ranked], days: list[str | None], rows: np.ndarray) -> None:
        seen.append((list(candidates), list(days)))

    ranker.OBSERVER = observe
    namespace = {"agent_id": "ranker-train", "session_id": re.sub(r"[^A-Za-z0-9_.:@-]", "-", case.id)}
    ours = Ours(folder / re.sub(r"[^A-Za-z0-9_.-]", "-", case.id), cached_name(embedder, cache),
                folder / "model-cache")
    groups = []
    try:
        for turn in case.turns:
            ours.record(namespace, turn)
        for query in case.queries:
            evidence = set(query.evidence)
            gold = [texts[e] for e in query.evidence if texts.get(e)]
            for budget in budgets:
                seen.clear()
                prompt = fold(ours.ask(namespace, query.text, budget)[0])
                if len(seen) != 1:
                    continue
                candidates, days = seen[0]
                labels = np.array([float(bool(collect_ids(c.memory.meta, "dia_id") & evidence)
                                         or any(g in fold(c.memory.content) for g in gold)) for c in candidates])
                tokens = np.array([tokenizer.count(c.memory.content) for c in candidates], dtype=np.float64)
                packed = np.array([fold(c.memory.content) in prompt for c in candidates])
                groups.append(Asked(case.suite, query.text, budget, candidates, days, labels, tokens, packed,
                                    len(evidence)))
    finally:
        ours.close()
        ranker.OBSERVER = None
    return case.id, groups


def collect(suites: list[str], budgets: list[int], workers: int, cache: Path | None, conversations: int,
            joined_conversations: int) -> list[Asked]:
    """Return the candidates of every dev question of the suites, in a fixed order (by case id)."""
    cases = build_cases(suites, False, conversations, data_folder(), "dev", joined_conversations)
    order = sorted(cases, key=lambda c: -len(c.lines) * max(1, len(c.queries)))
    with tempfile.TemporaryDirectory(prefix="ranker-train-") as scratch:
        jobs = [(c, budgets, "use", Path(scratch), cache) for c in order]
        if workers <= 1:
            found = [collect_case(job) for job in progress(jobs, total=len(jobs), desc="cases")]
        else:
            pool = multiprocessing.get_context("spawn").Pool(workers)
            try:
                found = list(progress(pool.imap(collect_case, jobs), total=len(jobs), desc="cases"))
            finally:
                pool.close()
                pool.join()
    return [asked for _, groups in sorted(found, key=lambda item: item[0]) for asked in groups]


def save_collected(collected: list[Asked], path: Path) -> None:
    """Write the collected questions to a gzipped JSON file (each stored memory once, by index)."""
    index: dict[int, int] = {}
    memories: list[dict[str, Any]] = []
    asked = []
    for a in collected:
        refs = []
        for c in a.candidates:
            if id(c.memory) not in index:
                index[id(c.memory)] = len(memories)
                memories.append(c.memory.model_dump(mode="json"))
            refs.append([index[id(c.memory)], c.score, c.parts])
        asked.append({"suite": a.suite, "query": a.query, "budget": a.budget, "candidates": refs, "days": a.days,
                      "labels": a.labels.tolist(), "tokens": a.tokens.tolist(), "packed": a.packed.tolist(),
                      "evidence": a.evidence})
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump({"memories": memories, "asked": asked}, handle, ensure_ascii=False)


def load_collected(path: Path) -> list[Asked]:
    """Return the questions save_collected wrote."""
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        data = json.load(handle)
    memories = [Memory.model_validate(m) for m in data["memories"]]
    return [Asked(a["suite"], a["query"], a["budget"], [Ranked(memories[m], score, parts)
                                                         for m, score, parts in a["candidates"]],
                  a["days"], np.array(a["labels"], dtype=np.float64), np.array(a["tokens"], dtype=np.float64),
                  np.array(a["packed"], dtype=bool), a["evidence"]) for a in data["asked"]]


def featured(collected: list[Asked]) -> Groups:
    """Return the feature rows of the collected questions that have evidence among their candidates (the others
    have nothing to learn from), computed by today's ranker.features."""
    kept = [a for a in collected if a.labels.sum() > 0]
    rows = [ranker.features(a.query, a.candidates, a.days) for a in kept]
    return Groups(np.round(np.concatenate(rows), 6), np.concatenate([a.labels for a in kept]),
                  np.array([len(a.labels) for a in kept]), [a.suite for a in kept])


def train(groups: Groups, rounds: int = ROUNDS) -> list[dict[str, list[Any]]]:
    """Return the trained lambdarank trees as arrays (see ranker.forest)."""
    import lightgbm

    data = lightgbm.Dataset(groups.rows, label=groups.labels, group=groups.sizes,
                            feature_name=list(ranker.FEATURES), params={"verbosity": -1})
    booster = lightgbm.train(PARAMS, data, num_boost_round=rounds)
    return export(booster.dump_model())


def export(dump: dict[str, Any]) -> list[dict[str, list[Any]]]:
    """Return a LightGBM dump's trees flattened, parents before children (numerical "<=" splits only)."""
    trees = []
    for info in dump["tree_info"]:
        tree: dict[str, list[Any]] = {"feature": [], "threshold": [], "left": [], "right": [], "value": []}

        def walk(node: dict[str, Any], tree: dict[str, list[Any]] = tree) -> int:
            index = len(tree["feature"])
            for key in tree:
                tree[key].append(None)
            if "leaf_value" in node:
                tree["feature"][index], tree["threshold"][index] = -1, 0.0
                tree["left"][index] = tree["right"][index] = -1
                tree["value"][index] = _rounded(node["leaf_value"])
                return index
            if node.get("decision_type") != "<=" or node.get("missing_type") not in (None, "None"):
                raise ValueError(f"unsupported split: {node.get('decision_type')} {node.get('missing_type')}")
            tree["feature"][index] = int(node["split_feature"])
            tree["threshold"][index] = _rounded(node["threshold"])
            tree["value"][index] = 0.0
            tree["left"][index] = walk(node["left_child"])
            tree["right"][index] = walk(node["right_child"])
            return index

        walk(info["tree_structure"])
        trees.append(tree)
    return trees


def synthetic(seed: int = 0, count: int = 600, size: int = 30) -> Groups:
    """Return random candidates whose relevance follows a few features (the evaluator's equivalence fixture)."""
    rng = np.random.default_rng(seed)
    rows = np.round(rng.random((count, len(ranker.FEATURES))), 6)
    rows[:, ranker.FEATURES.index("is_turn")] = rows[:, ranker.FEATURES.index("is_turn")] > 0.3
    labels = (rows[:, 0] + 0.6 * rows[:, 7] - 0.3 * rows[:, 13] + 0.2 * rng.random(count) > 1.0).astype(np.float64)
    return Groups(rows, labels, np.full(count // size, size), ["synthetic"] * (count // size))


def synthetic_collected(seed: int = 0, questions: int = 40, size: int = 30) -> list[Asked]:
    """Return random collected questions (memories, scores, parts) whose relevance follows the dense score and
    the query's words: the training command's determinism fixture, through today's ranker.features."""
    rng = np.random.default_rng(seed)
    words = ["相机", "书房", "咖啡", "电池", "camera", "coffee", "rain", "表姐", "birthday", "三脚架"]
    asked = []
    for number in range(questions):
        wanted = words[number % len(words)]
        candidates, labels = [], []
        for slot in range(size):
            text = " ".join(rng.choice(words, size=int(rng.integers(1, 5))).tolist())
            memory = Memory(id=f"m{number}-{slot}", kind="turn", content=text, importance=5, scope="session",
                            agent_id="a", session_id="s", created_at=0, updated_at=0, version=1,
                            turn_range=[slot, slot])
            dense, bm25 = float(rng.random()), float(rng.random()) * (wanted in text)
            candidates.append(Ranked(memory, round(0.5 * dense + 0.5 * bm25, 4),
                                     {"relevance": 0.5 * dense + 0.5 * bm25, "bm25": bm25, "dense": dense}))
            labels.append(float(dense + 0.5 * (wanted in text) + 0.3 * float(rng.random()) > 1.1))
        candidates.sort(key=lambda c: -c.score)
        asked.append(Asked("synthetic", f"{wanted}在哪？", 1000, candidates, [None] * size, np.array(labels),
                           np.full(size, 10.0), np.zeros(size, dtype=bool), 1))
    return asked


def fixture() -> dict[str, Any]:
    """Return trees trained by LightGBM on synthetic candidates, rows it did not see and its own predictions for
    them: tests/ranker_lightgbm.json, which tests/test_ranker.py holds the numpy evaluator to."""
    import lightgbm

    groups = synthetic()
    data = lightgbm.Dataset(groups.rows, label=groups.labels, group=groups.sizes,
                            feature_name=list(ranker.FEATURES), params={"verbosity": -1})
    booster = lightgbm.train(PARAMS, data, num_boost_round=30)
    unseen = synthetic(seed=1, count=60).rows
    return {"trees": export(booster.dump_model()), "rows": unseen.tolist(),
            "expected": [float(v) for v in booster.predict(unseen)]}


def _rounded(value: float) -> float:
    return float(f"{float(value):.{DIGITS}g}")


def model_text(trees: list[dict[str, list[Any]]], groups: Groups, suites: list[str], budgets: list[int]) -> str:
    """Return the model file's text (stable: sorted keys, fixed number format)."""
    data = {
        "format": ranker.MODEL_FORMAT,
        "feature_version": ranker.FEATURE_VERSION,
        "features": list(ranker.FEATURES),
        "trained_on": {"split": "dev", "suites": suites, "budgets": budgets, "embedder": "use",
                       "groups": len(groups.sizes), "candidates": int(groups.sizes.sum()),
                       "relevant": int(groups.labels.sum()), "rounds": len(trees), "seed": SEED,
                       "command": "python -m bench.train_ranker"},
        "modes": {"hybrid": {"trees": trees}},
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when the result differs")
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--conversations", type=int, default=30, help="zh-daily conversations (the dev half asked)")
    parser.add_argument("--joined-conversations", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--vector-cache", type=Path, default=None, help="as bench.recall's (passage vectors)")
    parser.add_argument("--data-cache", type=Path, default=None,
                        help="a .json.gz of the collected candidates (before features): read when it exists, "
                             "else written; retraining, with the same or changed features, without collecting again")
    parser.add_argument("--out", type=Path, default=ranker.MODEL_FILE)
    parser.add_argument("--write-fixture", type=Path, default=None,
                        help="write the evaluator's LightGBM fixture (tests/ranker_lightgbm.json) and stop")
    args = parser.parse_args(argv)
    if args.write_fixture is not None:
        args.write_fixture.write_text(json.dumps(fixture(), sort_keys=True) + "\n", encoding="utf-8")
        return 0
    suites = [s for s in args.suites.split(",") if s]
    budgets = [int(b) for b in args.budgets.split(",")]
    if args.data_cache is not None and args.data_cache.exists():
        collected = load_collected(args.data_cache)
    else:
        collected = collect(suites, budgets, args.workers, args.vector_cache, args.conversations,
                            args.joined_conversations)
        if args.data_cache is not None:
            save_collected(collected, args.data_cache)
    groups = featured(collected)
    text = model_text(train(groups), groups, suites, budgets)
    ranker.parse_model(text)  # what we write must load
    before = args.out.read_text(encoding="utf-8") if args.out.exists() else None
    same = before == text
    print(f"{len(groups.sizes)} groups, {int(groups.sizes.sum())} candidates, {int(groups.labels.sum())} relevant; "
          f"model {len(text)} bytes: " + ("identical to" if same else "DIFFERS from") + f" {args.out}")
    if args.check:
        return 0 if same else 1
    if not same:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
