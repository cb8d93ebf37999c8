"""Train the learned ranker of focused recall (acn/retrieval/ranker.py) on the dev halves of bench.recall.

Run: .venv/bin/python -m bench.train_ranker [--check] [--workers 2] [--vector-cache /tmp/vectors.sqlite]
                                            [--data-cache /tmp/ranker-data.npz] [--suites ...] [--budgets ...]

1. Collect: every dev case of the suites (fixed seeds: LoCoMo 0–4, MADial even dialogues, the even seeds of the
   generated suites) is fed to our app (record_turn, ACN_EMBEDDER=use) and each dev question asked through
   focused `assemble` at each budget, with the hand-tuned order (ACN_RANKER=off); the ranker's OBSERVER receives
   the features of the candidates that passed the floor. A candidate is relevant when it is an evidence message
   (its dia_id) or holds one's text word for word.
2. Train: LightGBM lambdarank, one query group per (question, budget), deterministic (one thread, fixed seed).
3. Export: the trees as arrays (acn/retrieval/ranker_model.json, mode "hybrid"); numbers to 9 significant digits.

The same seeds give the same file: the command says whether the new file differs from the one in the package
(with --check it does not write it and exits 1 when it differs). Test halves are never read here.
"""

from __future__ import annotations

import argparse
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

from acn.retrieval import ranker
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
    "min_data_in_leaf": 50,
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


Job = tuple[Case, list[int], str, Path, Path | None]


def collect_case(job: Job) -> tuple[str, list[tuple[np.ndarray, np.ndarray]]]:
    """Feed one case to our app and return, per dev question and budget, its candidates' features and labels."""
    case, budgets, embedder, folder, cache = job
    os.environ["ACN_RANKER"] = "off"
    texts = {line.dia_id: fold(line.content) for line in case.lines}
    seen: list[tuple[list[Any], np.ndarray]] = []

    def observe(query: str, candidates: list[Any], rows: np.ndarray) -> None:
        seen.append((candidates, rows.copy()))

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
                ours.ask(namespace, query.text, budget)
                if len(seen) != 1:
                    continue
                candidates, rows = seen[0]
                labels = np.array([float(bool(collect_ids(c.memory.meta, "dia_id") & evidence)
                                         or any(g in fold(c.memory.content) for g in gold)) for c in candidates])
                groups.append((rows, labels))
    finally:
        ours.close()
        ranker.OBSERVER = None
    return case.id, groups


def collect(suites: list[str], budgets: list[int], workers: int, cache: Path | None, conversations: int,
            joined_conversations: int) -> Groups:
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
    suite_of = {c.id: c.suite for c in cases}
    rows, labels, sizes, names = [], [], [], []
    for case_id, groups in sorted(found, key=lambda item: item[0]):
        for features, label in groups:
            if label.sum() == 0:  # nothing to learn from: no evidence among the candidates
                continue
            rows.append(features)
            labels.append(label)
            sizes.append(len(label))
            names.append(suite_of[case_id])
    return Groups(np.round(np.concatenate(rows), 6), np.concatenate(labels), np.array(sizes), names)


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
                        help="an .npz of the collected candidates: read when it exists, else written (retraining "
                             "without collecting again)")
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
        saved = np.load(args.data_cache)
        groups = Groups(saved["rows"], saved["labels"], saved["sizes"], [str(s) for s in saved["suites"]])
    else:
        groups = collect(suites, budgets, args.workers, args.vector_cache, args.conversations,
                         args.joined_conversations)
        if args.data_cache is not None:
            np.savez_compressed(args.data_cache, rows=groups.rows, labels=groups.labels, sizes=groups.sizes,
                                suites=np.array(groups.suites))
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
