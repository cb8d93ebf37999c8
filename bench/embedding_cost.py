"""What an embedder costs the request path (issue 17 §2): record_turn with vectors embedded inline or by the backlog,
the backlog's drain rate, and the query embedding inside memory_retrieve and assemble.

Run: .venv/bin/python -m bench.embedding_cost                 # none, e5 inline, e5 backlog (about a minute)
     .venv/bin/python -m bench.embedding_cost --modes none,e5  # a subset; --turns / --burst / --questions
Writes bench/results/embedding_cost.md (or --out). LoCoMo conversation 0 (../shared/data) supplies the messages
and questions; every mode runs in process (Flask test client) on its own fresh Milvus Lite file, one client,
sequential calls. Modes: `none` (BM25 only), `<embedder>-inline` (ACN_EMBEDDING_BACKLOG=off: rows embedded while
record_turn waits), `<embedder>` (the backlog: rows written at once, the worker embeds them meanwhile).
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench import locomo
from bench.perf import percentile, say
from common.models import Memory
from common.settings import Settings
from server import create_app

RESULTS = Path(__file__).resolve().parent / "results" / "embedding_cost.md"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"
NS = {"agent_id": "cost", "session_id": "s1"}


@dataclass
class Figures:
    mode: str
    record_ms: list[float] = field(default_factory=list)
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


def measure(mode: str, conversation: locomo.Conversation, turns: int, burst: int, questions: int,
            folder: Path) -> Figures:
    figures = Figures(mode)
    app = create_app(settings_of(mode, folder))
    runtime = app.extensions["acn"]
    client = app.test_client()
    try:
        embedder = runtime.memories.embedder
        if embedder is not None:
            embedder.warm()
        chat = locomo.turns_of(conversation.lines)
        for number, turn in enumerate(chat[: turns + 5]):
            started = time.perf_counter()
            response = client.post("/v1/nodes/record_turn",
                                   json={**NS, "messages": [locomo.message(line) for line in turn]})
            assert response.status_code == 200, response.get_data(as_text=True)
            if number >= 5:  # the first turns open the session's caches: not timed
                figures.record_ms.append((time.perf_counter() - started) * 1000)
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


def report(results: list[Figures], seconds: float, command: str, load: tuple[float, float]) -> str:
    lines = [f"# Embedding cost ({time.strftime('%Y-%m-%d')}, `{command}`, {seconds / 60:.1f} min)", "",
             f"{os.cpu_count()} cores, Python {platform.python_version()}; Milvus Lite; LoCoMo conversation 0; "
             f"one client, sequential calls, in process. 1-minute load average {load[0]:.1f} at the start, "
             f"{load[1]:.1f} at the end (other engineers' jobs share the machine).", "",
             "| mode | record_turn p50 | p95 | memory_retrieve p50 | p95 | assemble (focused, 2k) p50 | p95 | "
             "embed_query p50 | p95 | one passage p50 | p95 | rows waiting after the turns | backlog drain |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for figures in results:
        drain = f"{figures.drain_rows / figures.drain_seconds:.1f} passages/s ({figures.drain_rows} rows)" \
            if figures.drain_seconds else "–"
        waiting = str(figures.waiting_after_turns) if figures.drain_seconds else "–"
        lines.append(f"| {figures.mode} | {row(figures.record_ms)} | {row(figures.retrieve_ms)} | "
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
    parser.add_argument("--turns", type=int, default=60, help="timed record_turn calls per mode")
    parser.add_argument("--burst", type=int, default=200, help="rows of the drain-rate burst")
    parser.add_argument("--questions", type=int, default=30)
    parser.add_argument("--data", type=Path, default=SHARED if SHARED.exists() else locomo.DEFAULT_DATA)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    conversation = locomo.load(args.data, limit=1)[0]
    started, load = time.perf_counter(), os.getloadavg()[0]
    results = []
    for mode in args.modes.split(","):
        say(f"mode {mode}")
        with tempfile.TemporaryDirectory(prefix="acn-embed-cost-") as folder:
            results.append(measure(mode, conversation, args.turns, args.burst, args.questions, Path(folder)))
    command = "python -m bench.embedding_cost" + (f" --modes {args.modes}" if args.modes != "none,e5-inline,e5"
                                                  else "")
    text = report(results, time.perf_counter() - started, command, (load, os.getloadavg()[0]))
    print(text)
    args.out.write_text(text, encoding="utf-8")
    say(f"wrote {args.out}")


if __name__ == "__main__":
    main()
