"""LoCoMo ceilings: is a missed evidence turn a ranking miss or a budget miss?

Run: .venv/bin/python -m bench.locomo_ceiling [--data PATH] [--limit N] [--budgets 1000,2000,4000] [--embedder use]
                                              [--stores DIR] [--out PATH]

Two figures, on the same stores and questions as bench.locomo (focused mode):
- packing ceiling (oracle): every budget handed to the question's evidence turns alone, rendered exactly as the
  memory layer renders archived messages (shared date headers included) and packed shortest first. It bounds
  what any ranking could reach with our rendering; the questions whose evidence cannot all fit are counted.
- retrieval ceiling: the share of evidence turns present among the first N candidates of the focused ranking
  (facts, archived messages and their neighbours, before the score floor and the packing), N = 10, 25, 50, 150 and the
  whole candidate list (at most MAX_POOL per search list, plus neighbours).
Appends its tables to the --out Markdown file. Not part of the test run.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from acn.assembly.fit import fit_text_items
from acn.assembly.layers import memory_items
from acn.assembly.recall import MAX_TURN_POOL, day_weighted, focused_candidates
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Message, Namespace
from acn.text.tokens import Tokenizer, load_tokenizer
from bench.locomo import DEFAULT_DATA, Conversation, Line, OurSystem, ingest, load, store_name
from bench.progress import progress

DEPTHS = (10, 25, 50, 150)


@dataclass
class Ceilings:
    """Evidence turns counted per budget (packing) and per depth (retrieval)."""

    evidence: int = 0
    questions: int = 0
    packed: dict[int, int] = field(default_factory=dict)
    unfit_questions: dict[int, int] = field(default_factory=dict)
    ranked: dict[str, int] = field(default_factory=dict)


def evidence_memory(line: Line, position: int) -> Memory:
    """Return an evidence line as the archived message the store holds (content, speaker, date)."""
    return Memory(id=line.dia_id, kind="turn", content=line.content, importance=5, scope="session",
                  agent_id="locomo", session_id="oracle", created_at=0, updated_at=0, version=1,
                  turn_range=[position, position], meta={"name": line.speaker, "role": line.role, "date": line.date,
                                                         "dia_id": line.dia_id})


def packed_evidence(lines: list[Line], positions: dict[str, int], question: str, budget: int,
                    tokenizer: Tokenizer) -> int:
    """Return how many evidence lines fit when the whole budget (less the question) goes to them."""
    available = budget - tokenizer.count_message(Message(role="user", content=question))
    items = memory_items([evidence_memory(line, positions[line.dia_id]) for line in lines], "en", load_tokenizer())
    items.sort(key=lambda item: tokenizer.count(item.variants[0]))  # shortest first: the most lines that fit
    return len(fit_text_items(items, available, tokenizer).items)


def ranks_of_evidence(system: OurSystem, namespace: dict[str, str], question: str, evidence: list[str]) -> list[int]:
    """Return, per evidence turn, its position in the focused candidate list (-1 when absent)."""
    runtime = system.app.extensions["acn"]
    candidates = day_weighted(focused_candidates(Namespace(**namespace), question, runtime.deps(DEFAULT_TENANT),
                                                 top_k=5, turn_pool=MAX_TURN_POOL, history=[], shown_turns=set()))
    first: dict[str, int] = {}
    for index, candidate in enumerate(candidates):
        dia_id = candidate.memory.meta.get("dia_id")
        if isinstance(dia_id, str):
            first.setdefault(dia_id, index)
    return [first.get(e, -1) for e in evidence]


def measure(conversation: Conversation, budgets: list[int], embedder: str, folder: Path,
            tokenizer: Tokenizer) -> Ceilings:
    """Return both ceilings for one conversation (its store ingested, or reused from --stores)."""
    counts = Ceilings()
    lines = {line.dia_id: line for line in conversation.lines}
    positions = {line.dia_id: i for i, line in enumerate(conversation.lines)}
    namespace = {"agent_id": "locomo", "session_id": re.sub(r"[^A-Za-z0-9_.:@-]", "-", conversation.sample_id)}
    system = OurSystem(folder / embedder, embedder, "focused")
    try:
        ingest(system, conversation, namespace, folder / embedder, False)
        for question in progress(conversation.questions, desc=f"{conversation.sample_id} ceilings"):
            known = [lines[e] for e in question.evidence if e in lines]
            counts.questions += 1
            counts.evidence += len(question.evidence)
            for budget in budgets:
                fitted = packed_evidence(known, positions, question.text, budget, tokenizer)
                counts.packed[budget] = counts.packed.get(budget, 0) + fitted
                counts.unfit_questions[budget] = counts.unfit_questions.get(budget, 0) + (
                    fitted < len(question.evidence))
            ranks = ranks_of_evidence(system, namespace, question.text, question.evidence)
            for depth in (*[str(d) for d in DEPTHS], "all"):
                limit = int(depth) if depth != "all" else None
                hits = sum(r >= 0 and (limit is None or r < limit) for r in ranks)
                counts.ranked[depth] = counts.ranked.get(depth, 0) + hits
    finally:
        system.close()
    return counts


def report(total: Ceilings, budgets: list[int], embedder: str) -> str:
    """Return the Markdown tables of both ceilings."""
    lines = [f"**Ceilings** (`python -m bench.locomo_ceiling`, embedder {embedder}; {total.questions} questions, "
             f"{total.evidence} evidence turns)", "",
             "| budget | packing ceiling (oracle evidence recall) | questions whose evidence cannot all fit |",
             "|---|---|---|"]
    for budget in budgets:
        unfit = total.unfit_questions[budget]
        lines.append(f"| {budget} | {100 * total.packed[budget] / total.evidence:.1f} % | "
                     f"{unfit} ({100 * unfit / total.questions:.1f} %) |")
    lines += ["", "| candidates looked at | retrieval ceiling (evidence turns among them) |", "|---|---|"]
    for depth, hits in total.ranked.items():
        lines.append(f"| top {depth} | {100 * hits / total.evidence:.1f} % |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path of locomo10.json")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--budgets", default="1000,2000,4000", help="comma-separated context budgets")
    parser.add_argument("--embedder", default="use", help="one ACN_EMBEDDER value (none = BM25 only)")
    parser.add_argument("--stores", type=Path, default=None, help="reuse (or keep) the ingested stores here")
    parser.add_argument("--out", type=Path, default=None, help="append the tables to this Markdown file")
    args = parser.parse_args()
    budgets = [int(b) for b in args.budgets.split(",")]
    tokenizer = load_tokenizer()
    total = Ceilings()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.stores or Path(scratch)
        for conversation in load(args.data, args.limit):
            part = measure(conversation, budgets, args.embedder, folder / store_name(conversation), tokenizer)
            total.questions += part.questions
            total.evidence += part.evidence
            for budget in budgets:
                total.packed[budget] = total.packed.get(budget, 0) + part.packed[budget]
                total.unfit_questions[budget] = total.unfit_questions.get(budget, 0) + part.unfit_questions[budget]
            for depth, hits in part.ranked.items():
                total.ranked[depth] = total.ranked.get(depth, 0) + hits
    text = report(total, budgets, args.embedder)
    print(text)
    if args.out:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n" + text + "\n")


if __name__ == "__main__":
    main()
