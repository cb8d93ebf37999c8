"""Evidence recall on every suite, dev and test apart, our nodes beside window, BM25 and dense baselines.

Run: .venv/bin/python -m bench.recall [--quick] [--conversations N] [--suites locomo,madial-zh,madial-en,zh-daily]
                                      [--budgets 1000,2000,4000] [--ours-embedder use] [--dense-embedder use]
                                      [--workers 2] [--split dev|test|all] [--out bench/results/recall.md]
                                      [--vector-cache /tmp/vectors.sqlite]
Tuning: `--split dev` asks the dev questions only (LoCoMo 0–4, the even halves); look at test once, at the end.

Suites, each split by a fixed rule (tune on dev only; a change that helps dev and hurts test is no gain):
- locomo     LoCoMo conversations 0–4 are dev, 5–9 test; the question's evidence turns.
- madial-zh  MADial-Bench (zh): a user's memory bank is the haystack, one memory per message; the question is
- madial-en  the dialogue up to its (first) test turn; gold = its `relevant-id` memories. Even dialogue ids are
             dev, odd test (en dialogues carry no id: their line number, the same order as zh; en memories carry
             no user: the zh memory of the same id gives it).
- zh-daily   bench/zh_daily.py, generated: even seeds dev, odd seeds test (`--conversations N`, half each).
- zh-chain, en-chain    bench/joined.py, generated (even seeds dev, odd test; `--joined-conversations N`): an
- zh-ramble, en-ramble  entity named by one attribute and asked about another (two messages that share only the
                        entity), or a question after chit-chat and self-corrections (issue 28).
- locomo-xconv, zh-daily-xconv  bench/xconv.py: the same conversations and splits, each sitting its own
                        conversation of one user, the questions asked in a new one (issue 48).

Systems, all under the same budget (cl100k, the chat-format overhead per message, room left for the question):
- window  the newest whole messages that fit;
- bm25    rank_bm25 over the raw messages (jieba `cut_for_search` for Chinese, lower case, no punctuation);
- dense   cosine over the raw messages with a pluggable embedder (providers.embedders: `use`, `e5`, any registered);
- ours    the product: `record_turn` for every message (LoCoMo: per turn), then focused `assemble` with
          user_input = the question, through the app's test client on a Milvus Lite store in a temp folder.
Baselines pack whole messages by their ranking. Metrics: evidence recall (share of gold messages in the
context) and answer-in-context (the gold answer string is in it, where one exists), per category and split.

Data is read from ACN_BENCH_DATA, else ../shared/data beside the repository (or beside its worktree folder);
it is never copied into the repository. Writes bench/results/recall.md and prints the worst margin of ours
against bm25 on test and on dev. Not part of the test run (tests/test_bench_recall_suite.py runs --quick).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from acn.text.tokens import MESSAGE_OVERHEAD_TOKENS, Tokenizer, load_tokenizer
from bench import joined, locomo, xconv, zh_daily
from bench.baselines import BM25Baseline, Context, Turn, _context, _pack, window_context
from bench.progress import progress
from bench.scoring import Outcome, fold
from bench.vector_cache import cached_name

SUITES = ("locomo", "madial-zh", "madial-en", "zh-daily", "zh-chain", "zh-ramble", "en-chain", "en-ramble",
          *xconv.SUITES)
JOINED = {"zh-chain": ("zh", "chain"), "zh-ramble": ("zh", "ramble"), "en-chain": ("en", "chain"),
          "en-ramble": ("en", "ramble")}
SYSTEMS = ("window", "bm25", "dense", "ours")
SPLITS = ("dev", "test", "all")
REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "recall.md"
CATEGORY_NAMES = {"locomo": locomo.CATEGORIES, "locomo-xconv": locomo.CATEGORIES}


@dataclass(frozen=True)
class Query:
    text: str
    category: str
    evidence: list[str]
    answer: str | None
    split: str


@dataclass(frozen=True)
class Case:
    """One haystack (one store for ours) and the questions asked of it."""

    suite: str
    id: str
    turns: list[list[locomo.Line]]  # what record_turn gets, call by call
    queries: list[Query]
    speakers_in_text: bool = False  # LoCoMo has two speakers: the baselines show "Name: text"
    across: bool = False  # ours records each sitting as its own conversation of one user, asks in a new one (xconv)

    @property
    def lines(self) -> list[locomo.Line]:
        return [line for turn in self.turns for line in turn]

    def raw(self) -> list[Turn]:
        return [Turn(line.dia_id, f"{line.speaker}: {line.content}" if self.speakers_in_text else line.content)
                for line in self.lines]


@dataclass(frozen=True)
class Record:
    suite: str
    split: str
    budget: int
    system: str
    outcome: Outcome


def data_folder() -> Path:
    """Return the shared data folder: ACN_BENCH_DATA, else ../shared/data beside the repo or its worktree folder."""
    if os.environ.get("ACN_BENCH_DATA"):
        return Path(os.environ["ACN_BENCH_DATA"])
    candidates = [REPO.parent / "shared" / "data", REPO.parent.parent / "shared" / "data"]
    return next((c for c in candidates if c.exists()), candidates[0])


# --- suites ------------------------------------------------------------------------------------------------


def locomo_cases(folder: Path, conversations: list[int], sessions: int | None = None) -> list[Case]:
    """Return LoCoMo conversations as cases: 0–4 dev, 5–9 test (--quick: the first `sessions` sessions only,
    with the questions whose evidence lies in them)."""
    samples = json.loads((folder / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    cases = []
    for index in conversations:
        conversation = locomo.parse(samples[index])
        split = "dev" if index < 5 else "test"
        lines = [line for line in conversation.lines if sessions is None or line.session <= sessions]
        known = {line.dia_id for line in lines}
        queries = [Query(q.text, q.category, q.evidence, q.answer, split) for q in conversation.questions
                   if set(q.evidence) <= known]
        cases.append(Case("locomo", conversation.sample_id, locomo.turns_of(lines), queries, True))
    return cases


_SPEAKER_LINE = re.compile(r'^<([^>]+)>:\s*"?(.*?)"?\s*$', re.DOTALL)


def madial_cases(folder: Path, language: str, dialogues: int | None) -> list[Case]:
    """Return one case per user: the user's memory bank as messages, its dialogues (at most `dialogues`) as
    questions."""
    base = folder / "madial_bench"
    memories = _jsonl_merged(base / f"MADial-Bench-{language}-memory.json")
    owners = {k: v.get("user-id") for k, v in _jsonl_merged(base / "MADial-Bench-zh-memory.json").items()}
    rows = [json.loads(line) for line in (base / f"MADial-Bench-{language}-dialogue.json").read_text(
        encoding="utf-8").splitlines() if line.strip()]
    queries: dict[int, list[Query]] = {}
    for number, row in enumerate(rows[:dialogues]):
        dialogue_id = int(row.get("id", number))
        first_test = min(row["test-turn"])
        said = [m.group(1) + ": " + m.group(2) for line in row["dialogue"][1:first_test]
                if (m := _SPEAKER_LINE.match(line.strip()))]
        gold = [str(r) for r in row["relevant-id"]]
        category = "1 memory" if len(gold) == 1 else "2+ memories"
        queries.setdefault(int(row["user-id"]), []).append(
            Query("\n".join(said), category, [f"M{g}" for g in gold], None, "dev" if dialogue_id % 2 == 0 else "test"))
    cases = []
    for user, asked in sorted(queries.items()):
        bank = sorted(((m["time"], int(k), m) for k, m in memories.items()
                       if (m.get("user-id") if m.get("user-id") is not None else owners.get(k)) == user),
                      key=lambda t: (t[0], t[1]))
        lines = [locomo.Line(f"M{k}", "user", "user", f"{when} {m['event']}", 1, when) for when, k, m in bank]
        cases.append(Case(f"madial-{language}", f"madial-{language}-user{user}", [[line] for line in lines], asked))
    return cases


def _jsonl_merged(path: Path) -> dict[str, dict[str, Any]]:
    merged: dict[str, dict[str, Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            merged.update(json.loads(line))
    return merged


def zh_daily_cases(conversations: int, only: str | None = None) -> list[Case]:
    """Return `conversations` generated conversations, half from dev seeds, half from test seeds (`only`: that
    split's half alone)."""
    dev, test = (conversations + 1) // 2, conversations // 2
    cases = []
    chosen = (zh_daily.seeds("dev", dev) if only != "test" else []) + (zh_daily.seeds("test", test) if only != "dev"
                                                                        else [])
    for seed in chosen:
        conversation = zh_daily.generate(seed)
        lines = [locomo.Line(m.id, "user", "user", m.text, 1, m.date) for m in conversation.messages]
        queries = [Query(q.text, q.category, q.evidence, q.answer, conversation.split) for q in conversation.questions]
        cases.append(Case("zh-daily", conversation.id, [[line] for line in lines], queries))
    return cases


def joined_cases(suite: str, conversations: int, only: str | None = None) -> list[Case]:
    """Return the chained or rambling suite's generated conversations (bench/joined.py), half from dev seeds,
    half from test seeds (`only`: that split's half alone)."""
    language, shape = JOINED[suite]
    dev, test = (conversations + 1) // 2, conversations // 2
    chosen = (joined.seeds("dev", dev) if only != "test" else []) + (joined.seeds("test", test) if only != "dev"
                                                                       else [])
    cases = []
    for seed in chosen:
        conversation = joined.generate(seed, language, shape)
        lines = [locomo.Line(m.id, "user", "user", m.text, 1, m.date) for m in conversation.messages]
        queries = [Query(q.text, q.category, q.evidence, q.answer, conversation.split) for q in conversation.questions]
        cases.append(Case(suite, conversation.id, [[line] for line in lines], queries))
    return cases


# --- systems -----------------------------------------------------------------------------------------------

_EMBEDDERS: dict[str, Any] = {}


def embedder(name: str) -> Any:
    """Return the named embedder of providers.embedders (one per process): use, e5, hash, or one registered."""
    if name not in _EMBEDDERS:
        from acn.providers.embedders import load_embedder

        _EMBEDDERS[name] = load_embedder(name)
    return _EMBEDDERS[name]


class DenseBaseline:
    """Cosine similarity between the question and every raw message, one embedder, nothing else."""

    def __init__(self, turns: list[Turn], model: Any) -> None:
        import numpy as np

        self.turns, self.model = turns, model
        vectors = np.asarray(model.embed_batch([t.text for t in turns]), dtype="float32")
        self._vectors = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-9)

    def context(self, question: str, budget: int, tokenizer: Tokenizer) -> Context:
        import numpy as np

        query = np.asarray(self.model.embed_query(question), dtype="float32")  # e5: "query: …", stored "passage: …"
        scores = self._vectors @ (query / max(float(np.linalg.norm(query)), 1e-9))
        ranked = sorted(range(len(self.turns)), key=lambda i: (-float(scores[i]), i))
        room = budget - tokenizer.count(question) - MESSAGE_OVERHEAD_TOKENS
        return _context(self.turns, _pack(self.turns, ranked, room, tokenizer, stop_at_first=False), tokenizer,
                        question)


class Ours(locomo.OurSystem):
    """The product in process: an app on its own Milvus Lite store, fed and asked through the nodes (focused mode)."""

    def __init__(self, folder: Path, embedder_name: str, cache: Path) -> None:
        super().__init__(folder, embedder_name, "focused", cache=cache)


@dataclass(frozen=True)
class Job:
    case: Case
    budgets: list[int]
    ours_embedder: str
    dense_embedder: str
    folder: Path
    vector_cache: Path | None = None
    ablate: tuple[str, ...] = ()


def evaluate(job: Job) -> tuple[list[Record], float, float]:
    """Ask every question of one case at every budget of every system; return the records, the ingest seconds
    (record_turn calls) and the seconds the background backlog took to embed what was left after them."""
    case, tokenizer = job.case, load_tokenizer()
    from acn.assembly import hops

    hops.FOCUS, hops.SECOND_HOP = "focus" not in job.ablate, "hop" not in job.ablate  # per process (spawned)
    hops.DIALOGUE = "dialogue" not in job.ablate
    from acn.retrieval import learned_ranker as ranker

    ranker.LEARNED = "ranker" not in job.ablate  # without it: the hand-tuned order (ACN_RANKER=off)
    from acn.text import events

    events.QUESTION_FACTS = "question-facts" not in job.ablate  # a question with a key number kept as a fact
    events.ASSISTANT_FACTS = "+assistant-facts" in job.ablate  # the answers' numbers (tickets, dates) kept too
    raw = case.raw()
    texts = {turn.id: turn.text for turn in raw} | {line.dia_id: line.content for line in case.lines}
    dense_model = embedder(cached_name(job.dense_embedder, job.vector_cache))
    baselines: dict[str, Any] = {"bm25": BM25Baseline(raw), "dense": DenseBaseline(raw, dense_model)}
    records = []

    folded = {key: fold(text) for key, text in texts.items()}

    def add(system: str, query: Query, budget: int, context: str, ids: set[str], tokens: int,
            latency: float | None = None) -> None:
        recall, all_hit, answer_hit = evidence_score(query, folded, context, ids)
        records.append(Record(case.suite, query.split, budget, system,
                              Outcome(query.category, recall, all_hit, answer_hit, tokens, latency)))

    for query in case.queries:
        for budget in job.budgets:
            contexts = {"window": window_context(raw, query.text, budget, tokenizer),
                        **{name: b.context(query.text, budget, tokenizer) for name, b in baselines.items()}}
            for name, context in contexts.items():
                add(name, query, budget, context.text, set(context.ids), context.tokens)
    namespace = {"agent_id": "recall-bench", "session_id": re.sub(r"[^A-Za-z0-9_.:@-]", "-", case.id)}
    asked = xconv.asked_in(case) if case.across else namespace
    # One store a case: locomo and locomo-xconv share conversation ids, so the suite names the folder too.
    ours = Ours(job.folder / re.sub(r"[^A-Za-z0-9_.-]", "-", f"{case.suite}-{case.id}"),
                cached_name(job.ours_embedder, job.vector_cache), job.folder / "model-cache")
    try:
        started = time.perf_counter()
        for turn in case.turns:
            ours.record(xconv.recorded_in(case, turn) if case.across else namespace, turn)
        ingest = time.perf_counter() - started
        backlog = ours.app.extensions["acn"].backlog
        if backlog is not None:  # e5, use+e5: the rest of the embedding, timed apart (ask drains it anyway)
            backlog.drain(timeout=3600)
        embedding = time.perf_counter() - started - ingest
        for query in case.queries:
            for budget in job.budgets:
                prompt, ids, tokens, ms = ours.ask(asked, query.text, budget)
                add("ours", query, budget, prompt, ids, tokens, ms)
    finally:
        ours.close()
    return records, ingest, embedding


def evidence_score(query: Query, folded: dict[str, str], context: str,
                   ids: set[str]) -> tuple[float, bool, bool | None]:
    """Return (evidence recall, all evidence in, answer string in) for one context.

    A gold message counts when its id is among the context's sources or its text is in the context, both
    folded (case, spaces and punctuation ignored): a summary line that keeps a message word for word but
    drops its final 。 still carries it. The same rule for every system.
    """
    whole = fold(context)
    hits = [e in ids or (bool(folded.get(e)) and folded[e] in whole) for e in query.evidence]
    answer = None if query.answer is None or not fold(query.answer) else fold(query.answer) in whole
    return (sum(hits) / len(hits) if hits else 0.0), all(hits), answer


def run(cases: list[Case], budgets: list[int], ours_embedder: str, dense_embedder: str, folder: Path,
        workers: int, vector_cache: Path | None = None,
        ablate: tuple[str, ...] = ()) -> tuple[list[Record], dict[str, float]]:
    """Evaluate every case (largest first, in `workers` spawned processes); return the records and the seconds
    per suite of ingest (key: suite) and of the backlog's embedding after it (key: "suite embed")."""
    jobs = [Job(c, budgets, ours_embedder, dense_embedder, folder, vector_cache, ablate)
            for c in sorted(cases, key=lambda c: -len(c.lines) * max(1, len(c.queries)))]
    records: list[Record] = []
    ingest: dict[str, float] = {}
    results: Iterable[tuple[list[Record], float, float]]
    pool = None
    if workers <= 1:
        results = map(evaluate, jobs)
    else:
        # spawn, not fork: each worker opens its own Milvus Lite stores and model threads.
        pool = multiprocessing.get_context("spawn").Pool(workers)
        results = pool.imap(evaluate, jobs)
    try:
        for job, (rows, seconds, embedding) in zip(jobs, progress(results, total=len(jobs), desc="cases"),
                                                   strict=True):
            records += rows
            ingest[job.case.suite] = ingest.get(job.case.suite, 0.0) + seconds
            ingest[job.case.suite + " embed"] = ingest.get(job.case.suite + " embed", 0.0) + embedding
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    return records, ingest


# --- report ------------------------------------------------------------------------------------------------


def select(records: list[Record], category: str | None = None, **where: Any) -> list[Record]:
    """Return the records matching every field in `where` (split "all" matches both splits) and the category."""
    return [r for r in records if (category is None or r.outcome.category == category)
            and all((k == "split" and v == "all") or getattr(r, k) == v for k, v in where.items())]


def mean_recall(records: list[Record], category: str | None = None, **where: Any) -> float | None:
    """Return the mean evidence recall (%) of the selected records."""
    rows = select(records, category, **where)
    return 100 * statistics.mean(r.outcome.recall for r in rows) if rows else None


def mean_answer(records: list[Record], **where: Any) -> float | None:
    """Return the answer-in-context rate (%) of the selected records that have an answer string."""
    hits = [r.outcome.answer_hit for r in select(records, **where) if r.outcome.answer_hit is not None]
    return 100 * statistics.mean(bool(h) for h in hits) if hits else None


def categories(records: list[Record], suite: str) -> list[str]:
    return sorted({r.outcome.category for r in records if r.suite == suite},
                  key=lambda c: (list(zh_daily.CATEGORIES).index(c) if c in zh_daily.CATEGORIES else 99, c))


def margins(records: list[Record], budgets: list[int], split: str) -> list[tuple[float, str, int]]:
    """Return (ours − bm25 recall, suite, budget) for every suite and budget with records, worst first."""
    found = []
    for suite in SUITES:
        for budget in budgets:
            ours = mean_recall(records, suite=suite, split=split, budget=budget, system="ours")
            bm25 = mean_recall(records, suite=suite, split=split, budget=budget, system="bm25")
            if ours is not None and bm25 is not None:
                found.append((ours - bm25, suite, budget))
    return sorted(found)


def worst_margin_lines(records: list[Record], budgets: list[int]) -> list[str]:
    lines = []
    for split in ("test", "dev"):
        found = margins(records, budgets, split)
        if found:
            margin, suite, budget = found[0]
            lines.append(f"worst margin ours − bm25 on {split}: {margin:+.1f} points ({suite} at {budget} tokens)")
    return lines


def report(records: list[Record], budgets: list[int], ingest: dict[str, float], command: str,
           ours_embedder: str, dense_embedder: str, seconds: float) -> str:
    """Return the Markdown: one table per suite (system × budget; dev / test / all; categories on test)."""
    lines = [f"# Evidence recall, dev and test ({time.strftime('%Y-%m-%d')}, `{command}`, {seconds / 60:.1f} min)", "",
             f"ours = record_turn + focused assemble (ACN_EMBEDDER={ours_embedder}); dense = {dense_embedder} alone; "
             "bm25 = rank_bm25 over raw messages (jieba for Chinese); window = newest messages. Evidence recall %, "
             "cl100k budgets; answer = gold answer string in the context (test, where one exists).", ""]
    lines += [f"- {line}" for line in worst_margin_lines(records, budgets)] + [""]
    for suite in SUITES:
        rows = [r for r in records if r.suite == suite]
        if not rows:
            continue
        names = CATEGORY_NAMES.get(suite, {})
        cats = categories(records, suite)
        count = {s: len(select(rows, split=s, system="bm25", budget=budgets[0])) for s in ("dev", "test")}
        lines += [f"## {suite} (dev {count['dev']} questions, test {count['test']}; "
                  f"ingest {ingest.get(suite, 0):.0f} s, then background embedding "
                  f"{ingest.get(suite + ' embed', 0):.0f} s)",
                  "", "| system | budget | dev | test | all | answer (test) | "
                  + " | ".join(f"test: {c} {names.get(c, '')}".rstrip() for c in cats) + " |",
                  "|---|---|---|---|---|---|" + "---|" * len(cats)]
        for system in SYSTEMS:
            for budget in budgets:
                where = {"suite": suite, "system": system, "budget": budget}
                cells = [mean_recall(records, split=s, **where) for s in SPLITS]
                cells.append(mean_answer(records, split="test", **where))
                cells += [mean_recall(records, split="test", category=c, **where) for c in cats]
                lines.append(f"| {system} | {budget} | " + " | ".join(_pct(c) for c in cells) + " |")
        lines.append("")
    latencies = sorted(r.outcome.latency_ms for r in records if r.system == "ours" and r.outcome.latency_ms)
    if latencies:
        lines.append(f"assemble (ours) p50 {statistics.median(latencies):.0f} ms, "
                     f"p95 {latencies[int(0.95 * (len(latencies) - 1))]:.0f} ms over {len(latencies)} calls.")
    return "\n".join(lines)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


# --- command -----------------------------------------------------------------------------------------------


def build_cases(suites: list[str], quick: bool, conversations: int, folder: Path, split: str = "all",
                joined_conversations: int = 20) -> list[Case]:
    """Return the cases of the chosen suites: all of them, or a few of each with --quick; with split dev or
    test, only that split's questions (and only the cases that have some)."""
    cases: list[Case] = []
    if {"locomo", "locomo-xconv"} & set(suites):
        chosen = [1, 8] if quick else list(range(10))
        chosen = [i for i in chosen if split == "all" or (i < 5) == (split == "dev")]
        cases += across_too(suites, "locomo", locomo_cases(folder, chosen, 2 if quick else None))
    for language in ("zh", "en"):
        if f"madial-{language}" in suites:
            cases += madial_cases(folder, language, 8 if quick else None)
    if {"zh-daily", "zh-daily-xconv"} & set(suites):
        count = 2 if quick else conversations
        cases += across_too(suites, "zh-daily", zh_daily_cases(count, only=None if split == "all" else split))
    for suite in JOINED:
        if suite in suites:
            cases += joined_cases(suite, 2 if quick else joined_conversations, only=None if split == "all" else split)
    if split != "all":
        cases = [replace(c, queries=[q for q in c.queries if q.split == split]) for c in cases]
    return [c for c in cases if c.queries]


def across_too(suites: list[str], base: str, cases: list[Case]) -> list[Case]:
    """Return the cases of the chosen ones among a suite and its cross-conversation suite (bench/xconv.py)."""
    restated = next(name for name, of in xconv.BASE.items() if of == base)
    return [c for c in cases if base in suites] + [xconv.across(c) for c in cases if restated in suites]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="a smoke run: a few conversations of every suite")
    parser.add_argument("--conversations", type=int, default=30, help="zh-daily conversations (half dev, half test)")
    parser.add_argument("--joined-conversations", type=int, default=20,
                        help="conversations of each chained / rambling suite (half dev, half test)")
    parser.add_argument("--suites", default=",".join(SUITES))
    parser.add_argument("--ablate", default="", help="ours without these steps: focus, hop, dialogue "
                                                      "(acn/assembly/hops.py), ranker (the learned order, "
                                                      "acn/retrieval/learned_ranker.py), question-facts (questions "
                                                      "with a key number extracted as facts); or with "
                                                      "+assistant-facts (the answers' numbers kept as facts)")
    parser.add_argument("--budgets", default="1000,2000,4000")
    parser.add_argument("--ours-embedder", default="use", help="ACN_EMBEDDER of ours (none = BM25 only)")
    parser.add_argument("--dense-embedder", default="use", help="registered embedder name of the dense baseline")
    parser.add_argument("--workers", type=int, default=2, help="cases evaluated in parallel processes")
    parser.add_argument("--data", type=Path, default=None,
                        help="shared data folder (default: ACN_BENCH_DATA, else ../shared/data)")
    parser.add_argument("--split", choices=SPLITS, default="all",
                        help="ask only this split's questions (dev while tuning; the default table asks both)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--vector-cache", type=Path, default=None,
                        help="SQLite file of passage vectors kept between runs (bench only; queries are never "
                             "cached). With it the ingest and embedding seconds reflect the cache, not the model.")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    suites = [s for s in args.suites.split(",") if s]
    unknown = set(suites) - set(SUITES)
    if unknown:
        parser.error(f"unknown suites {sorted(unknown)}; known: {', '.join(SUITES)}")
    budgets = [int(b) for b in args.budgets.split(",")]
    cases = build_cases(suites, args.quick, args.conversations, args.data or data_folder(), args.split,
                        args.joined_conversations)
    with tempfile.TemporaryDirectory(prefix="recall-bench-") as scratch:
        records, ingest = run(cases, budgets, args.ours_embedder, args.dense_embedder, Path(scratch), args.workers,
                              args.vector_cache, tuple(a for a in args.ablate.split(",") if a))
    command = "python -m bench.recall" + " ".join([""] + (argv if argv is not None else sys.argv[1:]))
    text = report(records, budgets, ingest, command.strip(), args.ours_embedder, args.dense_embedder,
                  time.perf_counter() - started)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    print("\n".join(worst_margin_lines(records, budgets)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
