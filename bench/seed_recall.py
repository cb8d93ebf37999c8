"""The seed-style Chinese suite (bench/seed_suite.py), measured per mode beside a window and BM25, in one run.

Run: .venv/bin/python -m bench.seed_recall [--seed 4] [--sessions 32] [--budget 1000] [--window 2000] [--embedder use]

Each generated session (bench/seed_suite.py) is recorded turn by turn through `record_turn`; every
`--sample`-th turn a context is assembled in each mode for that turn's input (tokens per turn); after the
last turn every probe is asked in each mode. Figures per mode: clue hit rate (the fact is in the context),
stale served (a superseded value without the current one), tokens per turn, compression ratio (stored
working state / raw history) and numbers kept by compaction. The window and BM25 baselines get the same
questions and budget. Writes bench/results/seed_recall.md. Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from acn.common.models import Message
from acn.common.settings import Settings
from acn.text.numbers import value_present
from acn.text.tokens import load_tokenizer
from bench.baselines import BM25Baseline, Turn, window_context
from bench.progress import progress
from bench.seed_suite import Probe, Session, generate

MODES = ("snapshot", "focused", "streaming", "auto")
BASELINES = ("full history", "window (last N tokens)", "BM25 over raw turns")
SYSTEM = "你是一个严谨的助手，回答要基于用户之前确认过的信息。"


def raw_turns(session: Session) -> list[Turn]:
    """Return the session's messages as the baselines see them (tool calls shown as their results)."""
    return [Turn(f"{n}-{i}", f"{m['role']}: {m['content']}") for n, turn in enumerate(session.turns, 1)
            for i, m in enumerate(turn) if m.get("content")]


def judge(probe: Probe, context: str) -> tuple[bool, bool, bool]:
    """Return (clue in context, superseded value served without the current one, superseded value shown)."""
    hit = probe.clue in context
    shown = bool(probe.stale) and value_present(probe.stale or "", context)
    return hit, shown and not hit, shown


class Figures:
    """Counts per system (modes and baselines)."""

    def __init__(self) -> None:
        self.hits: dict[str, list[bool]] = {s: [] for s in (*MODES, *BASELINES)}
        self.stale: dict[str, list[bool]] = {s: [] for s in (*MODES, *BASELINES)}
        self.shown: dict[str, list[bool]] = {s: [] for s in (*MODES, *BASELINES)}
        self.stale_probes = 0
        self.tokens: dict[str, list[int]] = {s: [] for s in (*MODES, *BASELINES)}
        self.numbers = {"in_source": 0, "kept": 0}
        self.raw_tokens = 0
        self.kept_tokens = 0
        self.by_kind: dict[str, dict[str, list[bool]]] = {}


def run(sessions: list[Session], budget: int, window: int, embedder: str, sample: int, folder: Path) -> Figures:
    """Record every session, sample tokens per turn, ask every probe in every mode and baseline."""
    from acn.server import create_app

    app = create_app(Settings(milvus_uri=str(folder / "memory.db"), embedder=embedder, log_level="WARNING"))
    figures = Figures()
    try:
        for session in progress(sessions, desc="sessions"):
            nodes = Nodes(app.test_client(), {"agent_id": "seed-suite", "session_id": session.id}, budget, window)
            history = record(session, nodes, figures, sample)
            state = nodes.post("session_state", {})
            tokenizer = load_tokenizer()
            figures.kept_tokens += sum(s["tokens"] for s in state["segments"]) + sum(
                tokenizer.count_message(Message(**m)) for m in state["buffer"])
            figures.raw_tokens += sum(tokenizer.count_message(Message(**m)) for m in history)
            ask(session, figures, nodes.assemble, budget, tokenizer)
    finally:
        app.extensions["acn"].close()
    return figures


class Nodes:
    """The nodes of one session, called through the app's test client."""

    def __init__(self, client: Any, namespace: dict[str, str], budget: int, window: int) -> None:
        self.client, self.namespace, self.budget, self.window = client, namespace, budget, window

    def post(self, node: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self.client.post(f"/v1/nodes/{node}", json={**self.namespace, **body})
        assert response.status_code == 200, response.get_data(as_text=True)
        return dict(response.get_json())

    def assemble(self, text: str, mode: str) -> dict[str, Any]:
        return self.post("assemble", {"max_tokens": self.budget, "mode": mode, "system_prompt": SYSTEM,
                                      "user_input": text})

    def record_turn(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        return self.post("record_turn", {"messages": messages, "compaction": {"context_window": self.window}})


def record(session: Session, nodes: Nodes, figures: Figures, sample: int) -> list[dict[str, Any]]:
    """Record a session turn by turn; every `sample`-th turn, measure each mode's context and full history."""
    tokenizer = load_tokenizer()
    history: list[dict[str, Any]] = []
    for number, messages in enumerate(session.turns, 1):
        user = messages[0]["content"]
        if number % sample == 0:
            for mode in MODES:
                figures.tokens[mode].append(nodes.assemble(user, mode)["tokens"]["total"])
            everything = [{"role": "system", "content": SYSTEM}, *history, {"role": "user", "content": user}]
            figures.tokens["full history"].append(sum(tokenizer.count_message(Message(**m)) for m in everything))
        compaction = nodes.record_turn(messages)["compaction"]
        if compaction["compacted"]:
            stats = compaction["stats"]
            figures.numbers["in_source"] += stats["numbers_in_source"]
            figures.numbers["kept"] += stats["numbers_preserved"] + stats["numbers_restored"]
        history += messages
    return history


def ask(session: Session, figures: Figures, assemble: Any, budget: int, tokenizer: Any) -> None:
    """Ask every probe of a session in every mode and baseline; record hits and stale values."""
    raw = raw_turns(session)
    bm25 = BM25Baseline(raw)
    full = "\n".join(t.text for t in raw)
    for probe in session.probes:
        figures.stale_probes += bool(probe.stale)
        contexts = {mode: assemble(probe.question, mode)["prompt"] for mode in MODES}
        contexts["full history"] = full
        contexts["window (last N tokens)"] = window_context(raw, probe.question, budget, tokenizer).text
        contexts["BM25 over raw turns"] = bm25.context(probe.question, budget, tokenizer).text
        for system, context in contexts.items():
            hit, stale, shown = judge(probe, context)
            figures.hits[system].append(hit)
            figures.stale[system].append(stale)
            figures.shown[system].append(shown)
            figures.by_kind.setdefault(probe.kind, {}).setdefault(system, []).append(hit)


def report(figures: Figures, command: str, sessions: int, budget: int) -> str:
    """Return the Markdown table: one row per baseline and mode."""
    probes = len(figures.hits["focused"])
    lines = [f"Seed-style Chinese suite: {sessions} sessions of 40–80 turns, {probes} questions "
             f"({figures.stale_probes} about a value changed later), assemble max_tokens={budget} "
             f"({time.strftime('%Y-%m-%d')}, `{command}`)", "",
             "| context | clue hit | stale served (old value, no current) | old value shown at all "
             "| mean tokens/turn |", "|---|---|---|---|---|"]
    for system in (*BASELINES, *MODES):
        hits, stale, tokens = figures.hits[system], figures.stale[system], figures.tokens[system]
        mean_tokens = f"{statistics.mean(tokens):.0f}" if tokens else f"≤ {budget}"
        lines.append(f"| {system} | {100 * statistics.mean(hits):.1f} % ({sum(hits)}/{len(hits)}) | "
                     f"{sum(stale)} | {sum(figures.shown[system])} | {mean_tokens} |")
    kinds = sorted(figures.by_kind)
    lines += ["", "Clue hit % by fact kind:", "",
              "| context | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
    for system in (*BASELINES, *MODES):
        cells = [f"{100 * statistics.mean(figures.by_kind[k][system]):.0f}" for k in kinds]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    numbers = figures.numbers
    lines += ["",
              f"- compression ratio (stored working state / raw history): "
              f"{figures.kept_tokens / max(figures.raw_tokens, 1):.3f} "
              f"({figures.kept_tokens} / {figures.raw_tokens} tokens)",
              f"- numbers in compacted turns: {numbers['in_source']}, kept {numbers['kept']} "
              f"({100 * numbers['kept'] / max(numbers['in_source'], 1):.1f} %)",
              "- full history: every message of the session verbatim (its tokens per turn are what stacking costs);"
              " window and BM25 fill the same max_tokens"]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=4, help="generator seed")
    parser.add_argument("--sessions", type=int, default=32, help="number of sessions (4 domains in rotation)")
    parser.add_argument("--budget", type=int, default=1000, help="assemble max_tokens (and the baselines')")
    parser.add_argument("--window", type=int, default=2000, help="compaction context_window (trigger at 40 %%)")
    parser.add_argument("--embedder", default="use", help="ACN_EMBEDDER for our nodes (none = BM25 only)")
    parser.add_argument("--sample", type=int, default=4, help="measure tokens per turn every N turns")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "seed_recall.md")
    args = parser.parse_args()
    sessions = generate(args.seed, args.sessions)
    with tempfile.TemporaryDirectory() as folder:
        figures = run(sessions, args.budget, args.window, args.embedder, args.sample, Path(folder))
    flags = " ".join(f"--{k} {v}" for k, v in (("seed", args.seed), ("sessions", args.sessions),
                                                ("budget", args.budget), ("window", args.window),
                                                ("embedder", args.embedder))
                     if v != parser.get_default(k))
    text = report(figures, f"python -m bench.seed_recall {flags}".strip(), len(sessions), args.budget)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
