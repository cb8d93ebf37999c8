"""Where a node spends its time: pyinstrument over repeated in-process calls on a seeded Lite store.

Run: .venv/bin/python -m bench.profile assemble [--store 10000] [--turns 50] [--calls 40]
     (nodes: assemble, record_turn, memory_write, memory_retrieve)

The store is seeded as `bench.perf` seeds it; a session of --turns turns is recorded first (the 60-turn
customer-service scenario, repeated; with --unrepeated, every line made unique), then --calls calls are
profiled after five untimed ones. Prints the p50 and the call tree. Not part of the test run.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyinstrument import Profiler

from bench.perf import (
    SEED_KINDS,
    TARGET,
    InProcess,
    ask,
    conversation_turn,
    memory_text,
    opened_app,
    seed,
    target_items,
    unrepeated_turn,
)

SESSION = {"agent_id": "bench-profile", "session_id": "main"}


def bodies(node: str, turns: int) -> Callable[[int], dict[str, Any]]:
    """Return the i-th request body of the node's profiled calls."""
    rng = random.Random(7)
    questions = [question for _, _, question in target_items()]
    makers: dict[str, Callable[[int], dict[str, Any]]] = {
        "assemble": lambda i: ask(SESSION, i),
        "record_turn": lambda i: {**SESSION, "messages": conversation_turn(turns + 1 + i)},
        "memory_write": lambda i: {**SESSION, "items": [{"kind": SEED_KINDS[4 + k % 6], "content": memory_text(rng)[0]}
                                                         for k in range(100)]},
        "memory_retrieve": lambda i: {**TARGET, "query": questions[i % len(questions)], "top_k": 3},
    }
    return makers[node]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("node", choices=["assemble", "record_turn", "memory_write", "memory_retrieve"])
    parser.add_argument("--store", type=int, default=1000, help="memories seeded first")
    parser.add_argument("--turns", type=int, default=50, help="turns recorded into the profiled session")
    parser.add_argument("--calls", type=int, default=40)
    parser.add_argument("--unrepeated", action="store_true",
                        help="record the session with no line repeated (bench.perf's unrepeated_turn)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acn-profile-") as folder, opened_app(Path(folder) / "m.db") as app:
        seed(app.extensions["acn"], 0, args.store)
        transport = InProcess(app)
        turn_of = unrepeated_turn if args.unrepeated else conversation_turn
        for turn in range(1, args.turns + 1):
            transport.post("record_turn", {**SESSION, "messages": turn_of(turn)})
        body = bodies(args.node, args.turns)
        for i in range(5):
            transport.post(args.node, body(i))
        profiler, times = Profiler(interval=0.0005), []
        profiler.start()
        for i in range(5, 5 + args.calls):
            started = time.perf_counter()
            transport.post(args.node, body(i))
            times.append((time.perf_counter() - started) * 1000)
        profiler.stop()
    times.sort()
    print(f"{args.node}: p50 {times[len(times) // 2]:.1f} ms over {args.calls} calls "
          f"(store {args.store:,}, session {args.turns} turns; timings include the profiler's overhead)")
    print(profiler.output_text(unicode=True, color=False))


if __name__ == "__main__":
    main()
