"""memory_retrieve's tail in one namespace (issue 35): p50 / p95 / p99 at 1k and 10k memories, and where it goes.

Run: .venv/bin/python -m bench.tail                  # 1k and 10k memories in one namespace, 300 calls each
     .venv/bin/python -m bench.tail --sizes 1000     # one size
     .venv/bin/python -m bench.tail --sizes 100000   # a longer run
Prints a Markdown table (and writes it with --out). Not part of the test run.

Each call is timed in process (Flask test client: no HTTP noise) and split into what the issue suspects: the time
the garbage collector ran during the call (gc.callbacks, by generation) and the rest. A call is in the tail when
it is slower than the p95; the report says how much of the tail's excess over the median the collector explains.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from acn.common.auth import DEFAULT_TENANT
from acn.common.settings import Settings
from acn.server import create_app
from bench.perf import memory_text, seed_memory

NAMESPACE = {"agent_id": "tail-agent", "session_id": "tail-session"}
CALLS = 300
BATCH = 500


@dataclass
class GcClock:
    """Time spent in the collector, per generation, since the last reset."""

    started: float = 0.0
    seconds: dict[int, float] = field(default_factory=lambda: {0: 0.0, 1: 0.0, 2: 0.0})

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self.started = time.perf_counter()
        else:
            self.seconds[info["generation"]] += time.perf_counter() - self.started

    def reset(self) -> None:
        self.seconds = {0: 0.0, 1: 0.0, 2: 0.0}


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def measure(size: int, calls: int, folder: Path, *, settled: bool) -> dict[str, Any]:
    app = create_app(Settings(milvus_uri=str(folder / f"tail-{size}-{settled}.db"), log_level="WARNING",
                              cache_dir=str(folder / "cache")))
    runtime = app.extensions["acn"]
    try:
        rng, now = random.Random(size), int(time.time() * 1000)
        questions: list[str] = []
        for start in range(0, size, BATCH):
            batch = []
            for _ in range(min(BATCH, size - start)):
                content, question = memory_text(rng)
                batch.append(seed_memory(NAMESPACE, "fact", content, rng, now))
                questions.append(question)
            runtime.memories.save(DEFAULT_TENANT, batch)
        runtime.store.flush()
        client = app.test_client()
        for question in questions[:20]:  # warm: the namespace's index is built on its first read
            client.post("/v1/nodes/memory_retrieve", json={**NAMESPACE, "query": question})
        if settled and runtime.memories.cache is not None:
            runtime.memories.cache.settle()  # measure only once the session's index is loaded
        clock = GcClock()
        gc.callbacks.append(clock)
        latencies, in_gc, gen2 = [], [], []
        try:
            for index in range(calls):
                clock.reset()
                started = time.perf_counter()
                response = client.post("/v1/nodes/memory_retrieve",
                                       json={**NAMESPACE, "query": questions[rng.randrange(len(questions))]})
                latencies.append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, response.get_data(as_text=True)
                in_gc.append(sum(clock.seconds.values()) * 1000)
                gen2.append(clock.seconds[2] * 1000)
                if index % 50 == 0:
                    print(f"  {size}: {index}/{calls}", file=sys.stderr)
        finally:
            gc.callbacks.remove(clock)
        p50, p95 = statistics.median(latencies), percentile(latencies, 0.95)
        tail = [i for i, value in enumerate(latencies) if value >= p95]
        excess = sum(latencies[i] - p50 for i in tail) or 1.0
        return {"size": size, "settled": settled, "p50": p50, "p95": p95, "p99": percentile(latencies, 0.99),
                "max": max(latencies), "tail_gc_share": sum(in_gc[i] for i in tail) / excess,
                "tail_gen2_calls": sum(1 for i in tail if gen2[i] > 0), "tail_calls": len(tail),
                "gc_ms_total": sum(in_gc), "tail_positions": tail}
    finally:
        runtime.close()


def report(rows: list[dict[str, Any]]) -> str:
    lines = ["| memories in one namespace | measured | p50 ms | p95 ms | p99 ms | max ms | tail calls | of them with "
             "a gen-2 GC | share of the tail's excess spent in GC |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        when = "index loaded" if row["settled"] else "from the first read"
        lines.append(f"| {int(row['size']):,} | {when} | {row['p50']:.1f} | {row['p95']:.1f} | {row['p99']:.1f} | "
                     f"{row['max']:.1f} | {int(row['tail_calls'])} | {int(row['tail_gen2_calls'])} | "
                     f"{row['tail_gc_share']:.0%} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000])
    parser.add_argument("--calls", type=int, default=CALLS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure(size, args.calls, Path(folder), settled=settled) for size in args.sizes
                for settled in (False, True)]
    text = report(rows)
    print(text)
    for row in rows:
        print(f"{row['size']} settled={row['settled']}: tail calls at positions {row['tail_positions']}",
              file=sys.stderr)
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
