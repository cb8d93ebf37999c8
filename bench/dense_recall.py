"""Dense embedders against BM25 on bench.recall's suites, retrieval alone (issue 17 §2: choose the embedder by
measurement): bm25, dense with each embedder, and bm25 + dense fused by reciprocal rank (k = 60), each packing
whole raw messages by its ranking under the budget, exactly as bench.recall's baselines do.

Run: .venv/bin/python -m bench.dense_recall --suites madial-zh,madial-en --split dev [--embedders e5,use]
     .venv/bin/python -m bench.dense_recall --suites zh-daily --split dev --conversations 30 --workers 2
Writes bench/results/dense_recall-<suites>-<split>.md (or --out). Vectors are cached per embedder and text in a
folder (--cache, default a temp folder's sibling `acn-dense-cache`), so the test split and later runs reuse them.
Cost figures: passage ms = embedding time / messages embedded (batches of 16, one thread), query ms likewise.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from acn.text.terms import bm25_tokens
from acn.text.tokens import MESSAGE_OVERHEAD_TOKENS, Tokenizer, load_tokenizer
from bench.baselines import BM25Baseline, Context, Turn, _context, _pack
from bench.recall import Case, build_cases, data_folder, evidence_score, locomo_cases
from bench.scoring import fold

RESULTS = Path(__file__).resolve().parent / "results"
RRF_K = 60


class VectorCache:
    """Vectors of one embedder by text digest, in one .npy per text under folder (written once, read many)."""

    def __init__(self, name: str, folder: Path) -> None:
        from acn.providers.embedders import load_embedder

        self.name = name
        self.folder = folder / name
        self.folder.mkdir(parents=True, exist_ok=True)
        self._model: Any = None
        self._load = lambda: load_embedder(name)
        self.passage_seconds = self.query_seconds = 0.0
        self.passages = self.queries = 0

    def model(self) -> Any:
        if self._model is None:
            self._model = self._load()
        return self._model

    def passages_of(self, texts: list[str]) -> np.ndarray:
        return self._vectors(texts, "p")

    def query_of(self, text: str) -> np.ndarray:
        return self._vectors([text], "q")[0]

    def _vectors(self, texts: list[str], kind: str) -> np.ndarray:
        paths = [self.folder / f"{kind}-{hashlib.sha256(t.encode()).hexdigest()[:24]}.npy" for t in texts]
        missing = [i for i, path in enumerate(paths) if not path.exists()]
        if missing:
            started = time.perf_counter()
            wanted = [texts[i] for i in missing]
            made = self.model().embed_batch(wanted) if kind == "p" else [self.model().embed_query(t) for t in wanted]
            seconds = time.perf_counter() - started
            if kind == "p":
                self.passage_seconds, self.passages = self.passage_seconds + seconds, self.passages + len(wanted)
            else:
                self.query_seconds, self.queries = self.query_seconds + seconds, self.queries + len(wanted)
            for i, vector in zip(missing, made, strict=True):
                np.save(paths[i], np.asarray(vector, dtype=np.float32))
        vectors = np.stack([np.load(path) for path in paths])
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)


def packed(turns: list[Turn], ranked: list[int], question: str, budget: int, tokenizer: Tokenizer) -> Context:
    room = budget - tokenizer.count(question) - MESSAGE_OVERHEAD_TOKENS
    return _context(turns, _pack(turns, ranked, room, tokenizer, stop_at_first=False), tokenizer, question)


def evaluate(job: tuple[Case, list[int], str, list[str], Path]) -> tuple[list[tuple[str, str, int, str, float]],
                                                                         dict[str, list[float]]]:
    """Return (suite, category, budget, system, recall) rows of one case and the embedders' cost counters."""
    case, budgets, split, embedders, cache = job
    tokenizer = load_tokenizer()
    raw = case.raw()
    queries = [q for q in case.queries if split == "all" or q.split == split]
    if not queries:
        return [], {}
    texts = {turn.id: turn.text for turn in raw} | {line.dia_id: line.content for line in case.lines}
    folded = {key: fold(text) for key, text in texts.items()}
    bm25 = BM25Baseline(raw)
    caches = {name: VectorCache(name, cache) for name in embedders}
    passages = {name: c.passages_of([t.text for t in raw]) for name, c in caches.items()}
    rows = []
    for query in queries:
        scores = bm25._index.get_scores(bm25_tokens(query.text))
        bm25_ranked = sorted(range(len(raw)), key=lambda i: (-scores[i], i))
        rankings = {"bm25": bm25_ranked}
        for name, c in caches.items():
            similarity = passages[name] @ c.query_of(query.text)
            dense_ranked = sorted(range(len(raw)), key=lambda i: (-float(similarity[i]), i))
            rankings[f"dense {name}"] = dense_ranked
            fused = np.zeros(len(raw))
            for ranked in (bm25_ranked, dense_ranked):
                fused[ranked] += 1.0 / (RRF_K + np.arange(1, len(raw) + 1))
            rankings[f"bm25+{name} rrf"] = sorted(range(len(raw)), key=lambda i: (-fused[i], i))
        for system, ranked in rankings.items():
            for budget in budgets:
                context = packed(raw, ranked, query.text, budget, tokenizer)
                recall, _, _ = evidence_score(query, folded, context.text, set(context.ids))
                rows.append((case.suite, query.category, budget, system, recall))
    costs = {name: [c.passage_seconds, c.passages, c.query_seconds, c.queries] for name, c in caches.items()}
    return rows, costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suites", default="madial-zh,madial-en")
    parser.add_argument("--split", choices=["dev", "test", "all"], default="dev")
    parser.add_argument("--embedders", default="e5,use")
    parser.add_argument("--budgets", default="1000,2000,4000")
    parser.add_argument("--conversations", type=int, default=30, help="zh-daily conversations (half dev, half test)")
    parser.add_argument("--locomo", default="", help="LoCoMo conversations to use (e.g. 0,3; default all ten)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "acn-dense-cache")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    suites, budgets, embedders = args.suites.split(","), [int(b) for b in args.budgets.split(",")], \
        args.embedders.split(",")
    if args.locomo and "locomo" in suites:  # a subset of LoCoMo's conversations, by index (0–4 dev, 5–9 test)
        cases = build_cases([s for s in suites if s != "locomo"], False, args.conversations, data_folder())
        cases += locomo_cases(data_folder(), [int(n) for n in args.locomo.split(",")])
    else:
        cases = build_cases(suites, False, args.conversations, data_folder())
    started, load = time.perf_counter(), os.getloadavg()[0]
    jobs = [(case, budgets, args.split, embedders, args.cache) for case in cases]
    with ProcessPoolExecutor(max_workers=args.workers) as pool:
        results = list(pool.map(evaluate, jobs))
    rows = [row for case_rows, _ in results for row in case_rows]
    costs: dict[str, list[float]] = {}
    for _, case_costs in results:
        for name, values in case_costs.items():
            costs[name] = [a + b for a, b in zip(costs.get(name, [0.0] * 4), values, strict=True)]
    systems = list(dict.fromkeys(row[3] for row in rows))
    lines = [f"# Dense embedders vs BM25, retrieval alone ({time.strftime('%Y-%m-%d')}, `python -m bench.dense_recall "
             f"--suites {args.suites} --split {args.split} --embedders {args.embedders}"
             + (f" --locomo {args.locomo}" if args.locomo else "")
             + (f" --conversations {args.conversations}" if "zh-daily" in suites else "") + "`, "
             f"{(time.perf_counter() - started) / 60:.1f} min, load {load:.1f}–{os.getloadavg()[0]:.1f})", "",
             "Evidence recall % of whole raw messages packed by each ranking under the budget (bench.recall's "
             "baselines' packing and scoring). rrf: bm25 and dense fused by reciprocal rank (k 60).", ""]
    for suite in suites:
        mine = [row for row in rows if row[0] == suite]
        if not mine:
            continue
        count = len(mine) // (len(systems) * len(budgets))
        lines += [f"## {suite} ({args.split}, {count} questions)", "",
                  "| system | " + " | ".join(f"{b}" for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
        for system in systems:
            cells = [100 * statistics.mean(r[4] for r in mine if r[3] == system and r[2] == b) for b in budgets]
            lines.append(f"| {system} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
        lines.append("")
    for name, (p_seconds, p_count, q_seconds, q_count) in costs.items():
        if p_count or q_count:
            lines.append(f"- {name}: {1000 * p_seconds / max(p_count, 1):.1f} ms a passage over {int(p_count)} "
                         f"(batches of 16), {1000 * q_seconds / max(q_count, 1):.1f} ms a query over {int(q_count)} "
                         "(vectors already cached are not counted)")
    text = "\n".join(lines) + "\n"
    print(text)
    out = args.out or RESULTS / f"dense_recall-{args.suites.replace(',', '+')}-{args.split}.md"
    out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
