"""What an embedder costs the request path (issue 17 §2): record_turn with vectors embedded inline or by the backlog,
the backlog's drain rate, and the query embedding inside memory_retrieve and assemble.

Run: .venv/bin/python -m bench.embedding_cost                 # none, e5 inline, e5 backlog (about 4 minutes)
     .venv/bin/python -m bench.embedding_cost --modes none,e5  # a subset; --rounds / --turns / --gap / --burst
Writes bench/results/embedding_cost.md (or --out). LoCoMo conversation 0 (../shared/data) supplies the messages
and questions; every mode runs in process (Flask test client) on its own fresh Milvus Lite file, one client,
sequential calls. Modes: `none` (BM25 only), `<embedder>-inline` (ACN_EMBEDDING_BACKLOG=off: rows embedded while
record_turn waits), `<embedder>` (the backlog: rows written at once, the worker embeds them meanwhile).

record_turn is measured side by side: `--rounds` rounds, the modes alternating (the order reversed every other
round), each round a fresh store and the same turns, back to back and then paced (`--gap` seconds between
turns, as in a chat: the worker embeds between and during turns; `-inline` modes back to back only); the backlog
is drained between rounds. Besides
latency it reports how much of record_turn's time went to waiting for the store's write lock and for the
repository's write order (robust on a shared machine, where wall-clock percentiles move with the load), and how
often a request waited behind background work (the flusher, the worker's vector writes).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acn.common.models import Memory
from acn.common.settings import Settings
from acn.server import create_app
from bench import locomo
from bench.perf import percentile, say

RESULTS = Path(__file__).resolve().parent / "results" / "embedding_cost.md"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"
NS = {"agent_id": "cost", "session_id": "s1"}


@dataclass
class Turns:
    """record_turn in one mode, pooled over rounds, for one pacing (back to back, or with a gap)."""

    record_ms: list[float] = field(default_factory=list)
    lock_wait_ms: list[float] = field(default_factory=list)  # store write lock + write order, per call
    waits_behind_background: int = 0  # calls that waited for the store lock while background work held it
    round_p95: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)


@dataclass
class Figures:
    mode: str
    turns: dict[float, Turns] = field(default_factory=dict)  # by gap (seconds between turns)
    retrieve_ms: list[float] = field(default_factory=list)
    assemble_ms: list[float] = field(default_factory=list)
    query_ms: list[float] = field(default_factory=list)  # the embedder's embed_query alone, distinct questions
    passage_ms: list[float] = field(default_factory=list)  # embed_batch of one message, distinct messages
    drain_rows: int = 0
    drain_seconds: float = 0.0
    waiting_after_turns: int = 0


def settings_of(mode: str, folder: Path) -> Settings:
    embedder, _, inline = mode.partition("-")
    return Settings(milvus_uri=str(folder / "memory.db"), log_level="WARNING", cache_dir=str(folder / "cache"),
                    embedder=embedder, embedding_backlog="off" if inline else "auto")


class WaitClock:
    """Wraps a lock: adds the time this thread waited for it to `waited` (outermost acquisitions only)."""

    def __init__(self, inner: Any, thread: int) -> None:
        self.inner, self.thread, self.waited = inner, thread, 0.0
        self._depth = threading.local()

    def __enter__(self) -> WaitClock:
        started = time.perf_counter()
        self.inner.acquire()
        depth = getattr(self._depth, "n", 0)
        if depth == 0 and threading.get_ident() == self.thread:
            self.waited += time.perf_counter() - started
        self._depth.n = depth + 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth.n -= 1
        self.inner.release()


def record_round(mode: str, conversation: locomo.Conversation, turns: int, gap: float, folder: Path,
                 into: Turns) -> None:
    """One fresh store, the same turns; the backlog drained before the next round (its work is not the next's)."""
    app = create_app(settings_of(mode, folder))
    runtime = app.extensions["acn"]
    client = app.test_client()
    order = WaitClock(runtime.memories.write_order, threading.get_ident())
    runtime.memories.write_order = order
    into.loads.append(os.getloadavg()[0])
    timed: list[float] = []
    try:
        if runtime.memories.embedder is not None:
            runtime.memories.embedder.warm()
        for number, turn in enumerate(locomo.turns_of(conversation.lines)[: turns + 5]):
            before, waited = runtime.store.lock_stats(), order.waited
            started = time.perf_counter()
            response = client.post("/v1/nodes/record_turn",
                                   json={**NS, "messages": [locomo.message(line) for line in turn]})
            elapsed = (time.perf_counter() - started) * 1000
            assert response.status_code == 200, response.get_data(as_text=True)
            after = runtime.store.lock_stats()
            if number >= 5:  # the first turns open the session's caches: not timed
                timed.append(elapsed)
                into.lock_wait_ms.append((after["request_wait_seconds"] - before["request_wait_seconds"]
                                          + order.waited - waited) * 1000)
                into.waits_behind_background += int(after["request_waits_behind_background"]
                                                     - before["request_waits_behind_background"])
            if gap:
                time.sleep(gap)
        if runtime.backlog is not None:
            assert runtime.backlog.drain(timeout=300)
    finally:
        runtime.close()
    into.record_ms += timed
    into.round_p95.append(percentile(timed, 0.95))


def measure(mode: str, conversation: locomo.Conversation, burst: int, questions: int, folder: Path,
            figures: Figures) -> Figures:
    """The rest, once per mode: the drain rate of a burst, retrieve and assemble, the embedder alone."""
    app = create_app(settings_of(mode, folder))
    runtime = app.extensions["acn"]
    client = app.test_client()
    try:
        embedder = runtime.memories.embedder
        if embedder is not None:
            embedder.warm()
        for turn in locomo.turns_of(conversation.lines)[:65]:  # a session to retrieve from
            response = client.post("/v1/nodes/record_turn",
                                   json={**NS, "messages": [locomo.message(line) for line in turn]})
            assert response.status_code == 200, response.get_data(as_text=True)
        if runtime.backlog is not None:
            figures.waiting_after_turns = runtime.backlog.queued()
            assert runtime.backlog.drain(timeout=300)
            # Drain rate: a burst of rows written at once (one save), then the worker alone until none waits.
            lines = conversation.lines[-burst:]
            now = int(time.time() * 1000)
            rows = [Memory(id=f"burst-{i}", kind="turn", content=line.content, scope="session", agent_id="burst",
                           session_id="b", created_at=now + i, updated_at=now + i, version=1, importance=3.0)
                    for i, line in enumerate(lines)]
            filled = runtime.backlog.filled
            started = time.perf_counter()
            runtime.memories.save("default", rows)
            assert runtime.backlog.drain(timeout=600)
            figures.drain_seconds = time.perf_counter() - started
            figures.drain_rows = runtime.backlog.filled - filled
        # Distinct questions for each node: a text embedded once is remembered (the embedder's recent texts).
        asked = conversation.questions[: 2 * questions]
        for question, other in zip(asked[:questions], asked[questions:], strict=False):
            started = time.perf_counter()
            response = client.post("/v1/nodes/memory_retrieve", json={**NS, "query": question.text})
            assert response.status_code == 200, response.get_data(as_text=True)
            figures.retrieve_ms.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            response = client.post("/v1/nodes/assemble", json={**NS, "max_tokens": 2000, "mode": "focused",
                                                                "user_input": other.text})
            assert response.status_code == 200, response.get_data(as_text=True)
            figures.assemble_ms.append((time.perf_counter() - started) * 1000)
        if embedder is not None:
            fresh = type(embedder)() if mode.startswith(("e5", "use", "hash")) else embedder  # no recent-text memory
            for question in conversation.questions[2 * questions: 3 * questions]:
                started = time.perf_counter()
                fresh.embed_query(question.text)
                figures.query_ms.append((time.perf_counter() - started) * 1000)
            for line in conversation.lines[: questions]:
                started = time.perf_counter()
                fresh.embed_batch([line.content])
                figures.passage_ms.append((time.perf_counter() - started) * 1000)
    finally:
        runtime.close()
    return figures


def row(values: list[float]) -> str:
    if not values:
        return "– | –"
    return f"{percentile(values, 0.5):.1f} | {percentile(values, 0.95):.1f}"


def turns_row(mode: str, gap: float, turns: Turns) -> str:
    values, waits = turns.record_ms, turns.lock_wait_ms
    share = sum(waits) / sum(values) * 100 if values else 0.0
    rounds = " / ".join(f"{p95:.0f}" for p95 in turns.round_p95)
    loads = " / ".join(f"{load:.1f}" for load in turns.loads)
    return (f"| {mode} | {'back to back' if not gap else f'{gap:g} s apart'} | {len(values)} | "
            f"{percentile(values, 0.5):.1f} | {percentile(values, 0.95):.1f} | {percentile(values, 0.99):.1f} | "
            f"{rounds} | {share:.1f} % | {sum(1 for w in waits if w >= 1.0)} | {turns.waits_behind_background} | "
            f"{loads} |")


def report(results: list[Figures], seconds: float, command: str, load: tuple[float, float]) -> str:
    lines = [f"# Embedding cost ({time.strftime('%Y-%m-%d')}, `{command}`, {seconds / 60:.1f} min)", "",
             f"{os.cpu_count()} cores, Python {platform.python_version()}; Milvus Lite; LoCoMo conversation 0; "
             f"one client, sequential calls, in process. 1-minute load average {load[0]:.1f} at the start, "
             f"{load[1]:.1f} at the end (other engineers' jobs share the machine).", "",
             "## record_turn, side by side", "",
             "| mode | turns | calls | p50 | p95 | p99 | p95 per round | lock-wait share | calls that waited ≥ 1 ms | "
             "waits behind background work | load at each round |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    gaps = sorted({gap for figures in results for gap in figures.turns})
    for gap in gaps:
        lines += [turns_row(figures.mode, gap, figures.turns[gap]) for figures in results if gap in figures.turns]
    lines += ["", "Lock-wait share: time record_turn spent waiting for the store's write lock or the repository's "
              "write order, over its total time. Background work: the flusher and the embedding worker.", "",
              "## Retrieval, the embedder, the backlog", "",
              "| mode | memory_retrieve p50 | p95 | assemble (focused, 2k) p50 | p95 | "
              "embed_query p50 | p95 | one passage p50 | p95 | rows waiting after the turns | backlog drain |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for figures in results:
        drain = f"{figures.drain_rows / figures.drain_seconds:.1f} passages/s ({figures.drain_rows} rows)" \
            if figures.drain_seconds else "–"
        waiting = str(figures.waiting_after_turns) if figures.drain_seconds else "–"
        lines.append(f"| {figures.mode} | {row(figures.retrieve_ms)} | "
                     f"{row(figures.assemble_ms)} | {row(figures.query_ms)} | {row(figures.passage_ms)} | {waiting} | "
                     f"{drain} |")
    lines += ["", "ms unless stated. `<embedder>-inline`: ACN_EMBEDDING_BACKLOG=off. `embed_query` / `one passage`: "
              "the embedder alone on distinct texts (no recent-text memory), the cost inside retrieve/assemble and "
              "inside the worker. The drain is a burst of rows written in one save, then the worker alone "
              "(one e5 thread, nice 10)."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="none,e5-inline,e5")
    parser.add_argument("--turns", type=int, default=40, help="timed record_turn calls per mode and round")
    parser.add_argument("--rounds", type=int, default=2, help="record_turn rounds per mode (alternating)")
    parser.add_argument("--gap", type=float, default=0.5, help="seconds between paced turns (0: back to back only)")
    parser.add_argument("--burst", type=int, default=200, help="rows of the drain-rate burst")
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--data", type=Path, default=SHARED if SHARED.exists() else locomo.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    conversation = locomo.load(args.data, limit=1)[0]
    started, load = time.perf_counter(), os.getloadavg()[0]
    modes = args.modes.split(",")
    results = {mode: Figures(mode) for mode in modes}
    for gap in sorted({0.0, args.gap}):
        for number in range(args.rounds):
            for mode in modes if number % 2 == 0 else modes[::-1]:
                if gap and mode.endswith("-inline"):
                    continue  # inline embedding is measured back to back only (its cost is the embedding itself)
                say(f"record_turn, {mode}, round {number + 1}, gap {gap:g} s")
                with tempfile.TemporaryDirectory(prefix="acn-embed-cost-") as folder:
                    record_round(mode, conversation, args.turns, gap, Path(folder),
                                 results[mode].turns.setdefault(gap, Turns()))
    for mode in modes:
        say(f"retrieval and drain, {mode}")
        with tempfile.TemporaryDirectory(prefix="acn-embed-cost-") as folder:
            measure(mode, conversation, args.burst, args.questions, Path(folder), results[mode])
    command = "python -m bench.embedding_cost" + (f" --modes {args.modes}" if args.modes != "none,e5-inline,e5"
                                                  else "")
    text = report(list(results.values()), time.perf_counter() - started, command, (load, os.getloadavg()[0]))
    print(text)
    args.out.write_text(text, encoding="utf-8")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
