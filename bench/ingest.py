"""record_turn over real long conversations: LoCoMo ingested turn by turn, per-turn latency (issue 8).

Run: .venv/bin/python -m bench.ingest [--data PATH] [--limit N] [--embedder none]

The perf bench repeats one 60-turn scenario; a real conversation of 200–340 turns grows its working state all
the way (every statement and number of a merged segment is kept), and its compaction turns are the slow ones.
Each conversation goes into a fresh Milvus Lite file through `record_turn` (speaker A as user, speaker B as
assistant, as bench.locomo records it), back to back, and the table gives p50 / p95 / max per conversation,
the compaction turns apart. LoCoMo is CC BY-NC 4.0, read from the shared data folder or --data.
Writes bench/results/ingest.md. Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from acn.common.settings import Settings
from bench.locomo import DEFAULT_DATA, Conversation, load, message, turns_of
from bench.progress import progress

RECORD_TURN_P95 = 30.0  # ms, issue 8's target


@dataclass
class Ingest:
    """One conversation's record_turn latencies, in ms, and which turns compacted."""

    name: str
    times: list[float]
    compacted: list[bool]

    def row(self) -> str:
        ordered = sorted(self.times)
        compacting = [t for t, c in zip(self.times, self.compacted, strict=True) if c]
        others = [t for t, c in zip(self.times, self.compacted, strict=True) if not c]
        return (f"| {self.name} | {len(self.times)} | {sum(self.times) / 1000:.1f} | {percentile(ordered, 50):.1f} | "
                f"{percentile(ordered, 95):.1f} | {ordered[-1]:.0f} | {len(compacting)} | "
                f"{statistics.median(compacting) if compacting else 0:.1f} | "
                f"{percentile(sorted(others), 95) if others else 0:.1f} |")


def percentile(ordered: list[float], share: float) -> float:
    """Return the nearest-rank percentile of an ascending list."""
    return ordered[min(len(ordered) - 1, int(len(ordered) * share / 100))]


def ingest(conversation: Conversation, embedder: str) -> Ingest:
    """Record every turn of the conversation into a fresh store and return the latencies."""
    from acn.server import create_app

    with tempfile.TemporaryDirectory(prefix="acn-ingest-") as folder:
        app = create_app(Settings(milvus_uri=str(Path(folder) / "memory.db"), embedder=embedder,
                                  log_level="WARNING"))
        client = app.test_client()
        namespace = {"agent_id": "ingest", "session_id": conversation.sample_id}
        times, compacted = [], []
        try:
            for turn in turns_of(conversation.lines):
                started = time.perf_counter()
                response = client.post("/v1/nodes/record_turn",
                                       json={**namespace, "messages": [message(line) for line in turn]})
                times.append((time.perf_counter() - started) * 1000)
                if response.status_code != 200:
                    raise RuntimeError(f"record_turn answered {response.status_code}: "
                                       f"{response.get_data(as_text=True)[:300]}")
                compacted.append(bool(response.get_json()["compaction"]["compacted"]))
        finally:
            app.extensions["acn"].close()
    return Ingest(conversation.sample_id, times, compacted)


def report(results: list[Ingest], command: str) -> str:
    """Return the Markdown table, every conversation and all turns together."""
    lines = [f"# record_turn over LoCoMo conversations ({time.strftime('%Y-%m-%d')}, `{command}`)", "",
             "Back to back, one fresh Milvus Lite file per conversation, in process (test client). "
             f"Target: p95 ≤ {RECORD_TURN_P95:.0f} ms.", "",
             "| conversation | turns | total s | p50 ms | p95 ms | max ms | compaction turns | their p50 ms "
             "| other turns' p95 ms |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [result.row() for result in results]
    if len(results) > 1:
        lines.append(Ingest("all", [t for r in results for t in r.times],
                            [c for r in results for c in r.compacted]).row())
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path of locomo10.json")
    parser.add_argument("--limit", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--embedder", default="none", help="ACN_EMBEDDER for the nodes (use adds embedding time)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "ingest.md")
    args = parser.parse_args()
    conversations = load(args.data, args.limit)
    results = [ingest(c, args.embedder) for c in progress(conversations, desc="conversations")]
    text = report(results, " ".join(["python -m bench.ingest", *sys.argv[1:]]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
