"""LoCoMo evidence recall: our nodes against a last-N-tokens window and BM25 over raw turns, in one run.

Run: .venv/bin/python -m bench.locomo [--data PATH] [--limit N] [--budgets 1000,2000,4000] [--embedder use]
                                     [--workers 2] [--stores DIR]

Each conversation is recorded turn by turn through `record_turn` (speaker A as user, speaker B as assistant,
the dia_id and session date in `meta`); then, for every question and budget, `assemble` builds a context and
the same scorer reads it and the baselines' contexts. LoCoMo is CC BY-NC 4.0 (Maharana et al., ACL 2024):
it is read from the shared data folder or --data, never copied into this repository.
Writes bench/results/locomo.md. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import re
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from acn.common.settings import Settings
from acn.text.tokens import load_tokenizer
from bench.baselines import BM25Baseline, Turn, window_context
from bench.progress import progress
from bench.scoring import Outcome, Tally, collect_ids, evidence_ids

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "locomo" / "locomo10.json"
CATEGORIES = {"1": "multi-hop", "2": "temporal", "3": "open-domain", "4": "single-hop", "5": "adversarial"}
_SESSION = re.compile(r"^session_(\d+)$")


@dataclass(frozen=True)
class Line:
    """One LoCoMo message: who said it, where, when and what (an image caption is part of what)."""

    dia_id: str
    speaker: str
    role: str
    content: str
    session: int
    date: str


@dataclass(frozen=True)
class Question:
    text: str
    category: str
    evidence: list[str]
    answer: str | None  # a string the context must contain to answer; None when no single string does


@dataclass(frozen=True)
class Conversation:
    sample_id: str
    lines: list[Line]
    questions: list[Question]


def load(path: Path, limit: int | None = None) -> list[Conversation]:
    """Return the conversations (at most limit) with their questions."""
    samples = json.loads(path.read_text(encoding="utf-8"))
    return [parse(sample) for sample in samples[:limit]]


def parse(sample: dict[str, Any]) -> Conversation:
    """Return one sample's messages in order and its questions with normalised evidence ids."""
    conversation = sample["conversation"]
    roles = {conversation["speaker_a"]: "user", conversation["speaker_b"]: "assistant"}
    sessions = sorted((int(m.group(1)), key) for key in conversation if (m := _SESSION.match(key)))
    lines = []
    for number, key in sessions:
        date = str(conversation.get(f"{key}_date_time", ""))
        for turn in conversation[key] or []:
            content = str(turn.get("text", ""))
            if turn.get("blip_caption"):
                content += f" [shares a photo: {turn['blip_caption']}]"
            dia_id = evidence_ids([turn["dia_id"]])[0]
            lines.append(Line(dia_id, turn["speaker"], roles.get(turn["speaker"], "assistant"), content, number, date))
    questions = [Question(str(q["question"]), str(q["category"]), evidence_ids(q.get("evidence") or []),
                          str(q["answer"]) if q.get("answer") not in (None, "") else None)
                 for q in sample["qa"]]
    return Conversation(str(sample["sample_id"]), lines, [q for q in questions if q.evidence])


def turns_of(lines: list[Line]) -> list[list[Line]]:
    """Group messages into turns: a user message opens one, the replies join it."""
    turns: list[list[Line]] = []
    for line in lines:
        if line.role == "user" or not turns:
            turns.append([])
        turns[-1].append(line)
    return turns


def message(line: Line) -> dict[str, Any]:
    """Return the chat message of a line, its provenance in meta."""
    return {"role": line.role, "content": line.content, "name": re.sub(r"[^A-Za-z0-9_-]", "_", line.speaker),
            "meta": {"dia_id": line.dia_id, "session": line.session, "date": line.date}}


class OurSystem:
    """An app with its own Milvus Lite store, fed and asked through the nodes over the test client."""

    def __init__(self, folder: Path, embedder: str, mode: str, cache: Path | None = None) -> None:
        from acn.server import create_app

        cache_dir = {"cache_dir": str(cache)} if cache is not None else {}
        self.app = create_app(Settings(milvus_uri=str(folder / "memory.db"), embedder=embedder,
                                       log_level="WARNING", **cache_dir))
        self.client = self.app.test_client()
        self.mode = mode
        self.label = "ours" + (f" (hybrid, {embedder})" if embedder != "none" else " (BM25)")

    def record(self, namespace: dict[str, str], turn: list[Line]) -> None:
        response = self.client.post("/v1/nodes/record_turn",
                                    json={**namespace, "messages": [message(line) for line in turn]})
        assert response.status_code == 200, response.get_data(as_text=True)

    def ask(self, namespace: dict[str, str], question: str, budget: int) -> tuple[str, set[str], int, float]:
        backlog = self.app.extensions["acn"].backlog
        if backlog is not None:  # ACN_EMBEDDER=e5/openai: questions are asked once every recorded row has its vector
            backlog.drain(timeout=3600)
        started = time.perf_counter()
        response = self.client.post("/v1/nodes/assemble", json={**namespace, "max_tokens": budget,
                                                                  "mode": self.mode, "user_input": question})
        elapsed = (time.perf_counter() - started) * 1000
        assert response.status_code == 200, response.get_data(as_text=True)
        body = response.get_json()
        return body["prompt"], collect_ids(body["sources"], "dia_id"), body["tokens"]["total"], elapsed

    def close(self) -> None:
        self.app.extensions["acn"].close()


def run(conversations: list[Conversation], budgets: list[int], embedders: list[str], mode: str, folder: Path,
        workers: int = 1) -> tuple[dict[int, Tally], dict[str, float]]:
    """Evaluate every conversation (in `workers` processes, each conversation in stores of its own)."""
    jobs = [(c, budgets, embedders, mode, folder / store_name(c), workers == 1) for c in conversations]
    tallies = {budget: Tally() for budget in budgets}
    ingest_seconds: dict[str, float] = {}
    results: Iterable[tuple[dict[int, dict[str, list[Outcome]]], dict[str, float]]]
    if workers == 1:
        results = map(evaluate, jobs)
    else:
        # spawn, not fork: each worker opens its own Milvus Lite stores and gRPC channels.
        pool = multiprocessing.get_context("spawn").Pool(workers)
        results = pool.imap_unordered(evaluate, jobs)
    try:
        for outcomes, seconds in progress(results, total=len(jobs), desc="conversations"):
            for budget, by_system in outcomes.items():
                for system, rows in by_system.items():
                    for row in rows:
                        tallies[budget].add(system, row)
            for label, value in seconds.items():
                ingest_seconds[label] = ingest_seconds.get(label, 0.0) + value
    finally:
        if workers != 1:
            pool.close()
            pool.join()
    return tallies, ingest_seconds


def evaluate(job: tuple[Conversation, list[int], list[str], str, Path, bool]
             ) -> tuple[dict[int, dict[str, list[Outcome]]], dict[str, float]]:
    """Feed one conversation to each of our systems, ask every question at every budget, score all contexts."""
    conversation, budgets, embedders, mode, folder, verbose = job
    tokenizer = load_tokenizer()
    outcomes: dict[int, dict[str, list[Outcome]]] = {b: {} for b in budgets}
    namespace = {"agent_id": "locomo", "session_id": re.sub(r"[^A-Za-z0-9_.:@-]", "-", conversation.sample_id)}
    texts = {line.dia_id: line.content for line in conversation.lines}
    raw = [Turn(line.dia_id, f"{line.speaker}: {line.content}") for line in conversation.lines]
    bm25 = BM25Baseline(raw)
    for question in conversation.questions:
        for budget in budgets:
            for name, context in (("window (last N tokens)", window_context(raw, question.text, budget, tokenizer)),
                                  ("BM25 over raw turns", bm25.context(question.text, budget, tokenizer))):
                row = outcome(question, texts, context.text, set(context.ids), context.tokens)
                outcomes[budget].setdefault(name, []).append(row)
    seconds: dict[str, float] = {}
    for embedder in embedders:
        system = OurSystem(folder / embedder, embedder, mode)
        try:
            seconds[system.label] = ingest(system, conversation, namespace, folder / embedder, verbose)
            asks = [(q, b) for q in conversation.questions for b in budgets]
            for question, budget in progress(asks, desc=f"{conversation.sample_id} questions") if verbose else asks:
                prompt, ids, tokens, ms = system.ask(namespace, question.text, budget)
                outcomes[budget].setdefault(system.label, []).append(
                    outcome(question, texts, prompt, ids, tokens, ms))
        finally:
            system.close()
    return outcomes, seconds


def store_name(conversation: Conversation) -> str:
    """Return the folder name of a conversation's stores (stable across --limit, so --stores can reuse them)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", conversation.sample_id)


def ingest(system: OurSystem, conversation: Conversation, namespace: dict[str, str], folder: Path,
           verbose: bool) -> float:
    """Record every turn through record_turn and return the seconds it took.

    A store folder that a finished ingest marked (with --stores) is reused as it is: assemble only reads, and
    recording the same turns with the same code builds the same store, so only the question side is rerun.
    """
    marker = folder / "ingested.json"
    if marker.exists():
        return float(json.loads(marker.read_text(encoding="utf-8"))["seconds"])
    started = time.perf_counter()
    turns = turns_of(conversation.lines)
    for turn in progress(turns, desc=f"{conversation.sample_id} → {system.label}") if verbose else turns:
        system.record(namespace, turn)
    seconds = time.perf_counter() - started
    folder.mkdir(parents=True, exist_ok=True)
    marker.write_text(json.dumps({"seconds": seconds, "turns": len(turns)}), encoding="utf-8")
    return seconds


def outcome(question: Question, texts: dict[str, str], context: str, ids: set[str], tokens: int,
            latency_ms: float | None = None) -> Outcome:
    from bench.scoring import score

    recall, all_hit, answer_hit = score(question.evidence, texts, context, ids, question.answer)
    return Outcome(question.category, recall, all_hit, answer_hit, tokens, latency_ms)


def report(tallies: dict[int, Tally], ingest: dict[str, float], command: str, questions: int,
           conversations: int) -> str:
    """Return the Markdown tables: per budget, each system's recall per category and overall."""
    lines = [f"LoCoMo evidence recall, {conversations} conversations, {questions} questions "
             f"({time.strftime('%Y-%m-%d')}, `{command}`)", ""]
    for budget, tally in tallies.items():
        lines += [f"**Budget {budget} tokens** (cl100k; evidence recall % per category)", "",
                  "| system | " + " | ".join(f"{k} {v}" for k, v in CATEGORIES.items())
                  + " | overall | all evidence | answer in context | mean tokens | assemble p50 / p95 ms |",
                  "|---|" + "---|" * (len(CATEGORIES) + 5)]
        for system in tally.outcomes:
            overall = tally.summary(system)
            cats = [tally.summary(system, c).get("recall") for c in CATEGORIES]
            latency = (f"{overall['p50']:.0f} / {overall['p95']:.0f}" if overall["p50"] is not None else "–")
            lines.append(f"| {system} | " + " | ".join(_pct(c) for c in cats)
                         + f" | **{_pct(overall['recall'])}** | {_pct(overall['all_hit'])} | {_pct(overall['answer'])}"
                         f" | {overall['tokens']:.0f} | {latency} |")
        lines.append("")
    lines.append("Ingest (record_turn for every turn, summed over conversations): "
                 + ", ".join(f"{k} {v:.0f} s" for k, v in ingest.items()))
    lines.append("")
    lines.append(summary_line(tallies))
    return "\n".join(lines)


def summary_line(tallies: dict[int, Tally]) -> str:
    """Return one line per system: recall@1k=… recall@2k=… (evidence recall, all categories)."""
    systems = next(iter(tallies.values())).outcomes.keys()
    parts = []
    for system in systems:
        recalls = " ".join(f"recall@{b // 1000 if b % 1000 == 0 else b}{'k' if b % 1000 == 0 else ''}="
                           f"{tallies[b].summary(system)['recall']:.1f}%" for b in tallies)
        parts.append(f"- {system}: {recalls}")
    return "\n".join(parts)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path of locomo10.json")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--budgets", default="1000,2000,4000", help="comma-separated assemble max_tokens")
    parser.add_argument("--embedder", default="use",
                        help="comma-separated ACN_EMBEDDER values, one system each (none = BM25 only)")
    parser.add_argument("--mode", default="focused", help="assemble mode for the questions")
    parser.add_argument("--workers", type=int, default=2, help="conversations evaluated in parallel processes")
    parser.add_argument("--stores", type=Path, default=None,
                        help="keep the ingested stores here and reuse them on the next run (default: a temp folder)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "locomo.md")
    args = parser.parse_args()
    conversations = load(args.data, args.limit)
    budgets = [int(b) for b in args.budgets.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.stores or Path(scratch)
        tallies, seconds = run(conversations, budgets, args.embedder.split(","), args.mode, folder, args.workers)
    command = "python -m bench.locomo" + (f" --limit {args.limit}" if args.limit else "") + (
        f" --embedder {args.embedder}" if args.embedder != "use" else "")
    text = report(tallies, seconds, command, sum(len(c.questions) for c in conversations), len(conversations))
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
