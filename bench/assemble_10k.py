"""Focused assemble and record_turn latency with 10k memories in ONE namespace, per embedder (issue 28's cost target).

Run: .venv/bin/python -m bench.assemble_10k [--embedder use] [--size 10000] [--calls 60] [--out FILE]
                                            [--compare [--calls 200]] [--where] [--ready]

bench.perf seeds 10k memories spread over many namespaces (60 in the one it searches); this one puts them all in one
agent's session, where focused assemble's BM25 and dense searches, neighbours and second hop see every row: the store
is seeded through the repository (synthetic zh/en memories of bench.perf, four in ten archived turns), the backlog
drains, the app is closed and opened again (cold caches), a few warm-up calls, then `--calls` focused assembles at 1k
and at 4k tokens (questions bench.perf's generator makes for memories of the namespace, each asked once) and 50
record_turn calls of two messages in the same session. Each ten seeded rows are two turns of the session (four
archived messages) and six facts extracted from them. In process (Flask's test client), one call at a time.

`--compare` measures, in the same run, the 1k assemble as it is and with the cost cuts of VARIANTS undone: each
question is asked once per variant, the variants in a rotated order (so each comes first as often), and the
table gives each variant's times and their ratio to "now" (the machines are shared: a ratio in one run holds
where two runs' absolute times do not).

`--ready` waits, after the restart, until /readyz answers 200 (the start-up warm pass of acn/app/warmer.py is
done), as a deployment behind a readiness probe does; without it the first calls run while that pass does.

`--where` adds, for the 1k assembles, the wall-clock milliseconds per call spent in each step of WHERE (timers
around those functions only: unlike cProfile's, they do not slow the many small calls in between, so the shares
are those of an unprofiled call). Steps nest (a search's store time is inside its hop's): they do not add up.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import wraps
from pathlib import Path
from typing import Any

from flask.testing import FlaskClient

from acn.assembly import hops
from acn.common.auth import DEFAULT_TENANT
from acn.common.settings import Settings
from acn.retrieval import hybrid_rank as rank
from acn.server import create_app
from bench.perf import SEED_KINDS, memory_text, seed_memory

NAMESPACE = {"agent_id": "big-agent", "session_id": "big-session"}
BATCH = 500
READY_WAIT = 600.0  # seconds --ready waits for /readyz at most
# What --compare sets for each variant: the hop's legs' pool, and whether score_all builds only what may be kept.
VARIANTS = {
    "now": {"hop_pool": hops.HOP_SEARCH_POOL, "leave_out": True},
    "hop legs take 120": {"hop_pool": rank.MIN_POOL, "leave_out": True},
    "every candidate built": {"hop_pool": hops.HOP_SEARCH_POOL, "leave_out": False},
    "before both": {"hop_pool": rank.MIN_POOL, "leave_out": False},
}


# --where: (module, attribute path) of each step timed, outermost first.
WHERE = (
    ("acn.assembly.assemble", "assemble"),
    ("acn.assembly.recall", "focused_memories"),
    ("acn.assembly.hops", "second_hops"),
    ("acn.providers.embedders", "Embedder.embed_query"),
    ("acn.storage.database.lite.local_index", "LocalIndex.search_dense"),
    ("acn.storage.database.lite.local_index", "LocalIndex.search_text"),
    ("acn.storage.database.lite.local_index", "LocalIndex._memories"),
    ("acn.retrieval.hybrid_rank", "score_all"),
    ("acn.assembly.recall", "with_neighbours"),
    ("acn.assembly.recall", "readable"),
    ("acn.retrieval.learned_ranker", "reordered"),
    ("acn.assembly.assemble", "fit_layers"),
    ("acn.assembly.assemble", "build_response"),
)


@contextlib.contextmanager
def timed_steps(spent: dict[str, float]) -> Iterator[list[bool]]:
    """Within the block, add each WHERE step's wall-clock seconds to `spent` (a recursive call counted once) while
    the yielded switch's one value is True (set it False for calls that are not to be counted)."""
    counting = [True]
    restore: list[tuple[Any, str, Any]] = []
    try:
        for module_name, path in WHERE:
            owner: Any = importlib.import_module(module_name)
            *outer, name = path.split(".")
            for part in outer:
                owner = getattr(owner, part)
            original = getattr(owner, name)
            wrapper = _timer(original, path, spent, counting)
            # A function is also called through the names other modules imported it under.
            holders = [owner, *(m for m in list(sys.modules.values()) if not outer and m is not owner
                                 and getattr(m, "__name__", "").startswith("acn.")
                                 and getattr(m, name, None) is original)]
            for holder in holders:
                restore.append((holder, name, original))
                setattr(holder, name, wrapper)
        yield counting
    finally:  # also when a step could not be found: every name already wrapped is put back
        for owner, name, original in reversed(restore):
            setattr(owner, name, original)


def _timer(function: Callable[..., Any], step: str, spent: dict[str, float],
           counting: list[bool]) -> Callable[..., Any]:
    active = [0]

    @wraps(function)
    def timed(*args: Any, **kwargs: Any) -> Any:
        active[0] += 1
        began = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            active[0] -= 1
            if not active[0] and counting[0]:
                spent[step] = spent.get(step, 0.0) + time.perf_counter() - began
    return timed


def use_variant(name: str) -> None:
    hops.HOP_SEARCH_POOL = VARIANTS[name]["hop_pool"]
    rank.LEAVE_OUT = bool(VARIANTS[name]["leave_out"])


def compared(client: FlaskClient, questions: list[str]) -> list[str]:
    """Ask each question once per variant, in rotated order; return the table's lines."""
    names = list(VARIANTS)
    times: dict[str, list[float]] = {name: [] for name in names}
    try:
        for number, question in enumerate(questions):
            for name in names[number % len(names):] + names[:number % len(names)]:
                use_variant(name)
                began = time.perf_counter()
                response = client.post("/v1/nodes/assemble", json={**NAMESPACE, "mode": "focused",
                                                                    "user_input": question, "max_tokens": 1000})
                times[name].append((time.perf_counter() - began) * 1000)
                assert response.status_code == 200, response.get_data(as_text=True)
    finally:
        use_variant("now")
    now = times["now"]
    lines = ["| assemble 1k | n | p50 ms | p95 ms | mean ms | p50 / now | mean / now |",
             "|---|---|---|---|---|---|---|"]
    for name, values in times.items():
        lines.append(f"| {name} | {len(values)} | {percentile(values, 0.5):.1f} | {percentile(values, 0.95):.1f} | "
                     f"{statistics.mean(values):.1f} | {percentile(values, 0.5) / percentile(now, 0.5):.2f} | "
                     f"{statistics.mean(values) / statistics.mean(now):.2f} |")
    return lines


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * (len(ordered) - 1) + 0.5))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedder", default="use")
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--out", default="")
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions of the 1k assembles")
    parser.add_argument("--compare", action="store_true", help="the 1k assemble with and without the cost cuts")
    parser.add_argument("--where", action="store_true", help="milliseconds per 1k assemble in each step of WHERE")
    parser.add_argument("--ready", action="store_true",
                        help="wait for /readyz (the start-up warm pass done) before the first call")
    args = parser.parse_args()
    started, load = time.perf_counter(), os.getloadavg()[0]
    rng, now = random.Random(28), int(time.time() * 1000)
    questions: list[str] = []
    with tempfile.TemporaryDirectory(prefix="assemble-10k-") as folder:
        settings = Settings(milvus_uri=str(Path(folder) / "memory.db"), embedder=args.embedder, log_level="WARNING",
                            cache_dir=str(Path(folder) / "cache"))
        app = create_app(settings)
        runtime = app.extensions["acn"]
        batch = []
        for index in range(args.size):
            content, question = memory_text(rng)
            questions.append(question)
            memory = seed_memory(NAMESPACE, SEED_KINDS[index % len(SEED_KINDS)], content, rng, now)
            # A session's turns as a conversation has them: each ten rows are two turns (two archived messages
            # each) and the six facts extracted from them. (bench.perf's random turn 1-200 is for rows spread over
            # many sessions; in one session it would give every turn ~20 archived messages.)
            turn = index // 5 + 1
            batch.append(memory.model_copy(update={"turn_range": [turn, turn]}))
            if len(batch) == BATCH or index == args.size - 1:
                runtime.memories.save(DEFAULT_TENANT, batch)
                batch = []
        if runtime.backlog is not None:
            runtime.backlog.drain(timeout=3600)
        seeded = time.perf_counter() - started
        runtime.close()
        app = create_app(settings)  # cold caches, as after a restart
        runtime = app.extensions["acn"]
        client = app.test_client()
        asked = random.Random(5).sample(questions, 2 * args.calls + 5)
        table: list[str] = []
        spent: dict[str, float] = {}
        ready = ""
        times: dict[str, list[float]] = {"assemble 1k": [], "assemble 4k": [], "record_turn": [],
                                         "assemble 1k after a record_turn": []}
        try:
            if args.ready:  # as a deployment's readiness probe: no call before the start-up warm pass is done
                waited = time.perf_counter()
                while client.get("/readyz").status_code != 200 and time.perf_counter() - waited < READY_WAIT:
                    time.sleep(0.05)
                ready = f" /readyz answered 200 {time.perf_counter() - waited:.1f} s after the restart, then"
            for question in asked[:5]:  # warm-up: the first search loads the session's rows
                client.post("/v1/nodes/assemble", json={**NAMESPACE, "mode": "focused", "user_input": question})
            if args.compare:
                table = compared(client, asked[5:5 + args.calls])
                times.clear()
            profiler = None
            if args.profile:
                import cProfile
                profiler = cProfile.Profile()
            with timed_steps(spent) if args.where else contextlib.nullcontext([False]) as counting:
                for number, question in enumerate(asked[5:] if times else []):
                    budget = 1000 if number % 2 == 0 else 4000
                    counting[0] = budget == 1000  # the 4k calls pass the timers without being counted
                    if profiler is not None and budget == 1000:
                        profiler.enable()
                    began = time.perf_counter()
                    response = client.post("/v1/nodes/assemble", json={**NAMESPACE, "mode": "focused",
                                                                        "user_input": question, "max_tokens": budget})
                    times[f"assemble {budget // 1000}k"].append((time.perf_counter() - began) * 1000)
                    if profiler is not None and budget == 1000:
                        profiler.disable()
                    assert response.status_code == 200, response.get_data(as_text=True)
            if profiler is not None:
                import pstats
                pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
            for turn in range(50 if times else 0):
                messages = [{"role": "user", "content": f"{questions[-1 - turn]} (turn {turn})"},
                            {"role": "assistant", "content": f"Noted: {questions[turn]}"}]
                began = time.perf_counter()
                response = client.post("/v1/nodes/record_turn", json={**NAMESPACE, "messages": messages})
                times["record_turn"].append((time.perf_counter() - began) * 1000)
                assert response.status_code == 200, response.get_data(as_text=True)
            # The agent loop: each turn recorded, then the next input assembled (the writes between change what
            # the calls above kept from one assemble to the next).
            for turn, question in enumerate(asked[5:35] if times else []):
                messages = [{"role": "user", "content": f"{questions[turn]} (loop {turn})"},
                            {"role": "assistant", "content": f"Noted: {questions[-1 - turn]}"}]
                response = client.post("/v1/nodes/record_turn", json={**NAMESPACE, "messages": messages})
                assert response.status_code == 200, response.get_data(as_text=True)
                began = time.perf_counter()
                response = client.post("/v1/nodes/assemble", json={**NAMESPACE, "mode": "focused",
                                                                    "user_input": question, "max_tokens": 1000})
                times["assemble 1k after a record_turn"].append((time.perf_counter() - began) * 1000)
                assert response.status_code == 200, response.get_data(as_text=True)
        finally:
            runtime.close()
    flag = "".join(f" --{name}" for name in ("compare", "ready", "where") if getattr(args, name))
    lines = [f"# Focused assemble with {args.size:,} memories in one namespace, ACN_EMBEDDER={args.embedder} "
             f"({time.strftime('%Y-%m-%d')}, `python -m bench.assemble_10k --embedder {args.embedder}{flag}`)", "",
             f"In process, one call at a time, after a restart,{ready} 5 warm-up calls; seeding and embedding took "
             f"{seeded:.0f} s. 1-minute load average {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
             f"({os.cpu_count()} cores, shared).", "",
             *(table if args.compare else ["| call | n | p50 ms | p95 ms | mean ms |", "|---|---|---|---|---|"])]
    for name, values in times.items():
        lines.append(f"| {name} | {len(values)} | {percentile(values, 0.5):.1f} | {percentile(values, 0.95):.1f} | "
                     f"{statistics.mean(values):.1f} |")
    if spent:
        calls = len(times["assemble 1k"])
        lines += ["", "Where a 1k assemble's time goes (`--where`; steps nest, so they do not add up):", "",
                  "| step | ms per call | share of the call |", "|---|---|---|"]
        whole = spent.get("assemble") or 1.0
        lines += [f"| {step} | {1000 * seconds / calls:.2f} | {100 * seconds / whole:.0f} % |"
                  for step, seconds in sorted(spent.items(), key=lambda item: -item[1])]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
