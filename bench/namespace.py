"""One agent's memory growing: writes, first search after a restart, cold start and RSS per agent (issue 21).

Run: .venv/bin/python -m bench.namespace                      # one namespace at 1k and 10k memories, 5,000 agents
     .venv/bin/python -m bench.namespace --sizes 1000,10000,100000
     .venv/bin/python -m bench.namespace --agents 0 --sizes 1000   # smoke
Prints a Markdown table (and writes it with --out).

For each size N, in one namespace (one agent, one session): the store is filled to N − W memories straight through
the repository, the process "restarts" (the app is closed and opened again: every in-process cache is cold), then
W more are written through memory_write, 100 items per call (the first call pays for whatever the write path loads
after a restart: it is reported apart). Then another restart, and the first memory_retrieve of the namespace is
timed (and the p50 of the next ones); then `python server.py` is launched on the store and timed to its first
answer. Last, a server on an empty store gets `--agents` agents, each writing two memories and searching once, and
its RSS is read before and after from /proc.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from acn.common.auth import DEFAULT_TENANT
from bench.perf import InProcess, OverHttp, memory_text, opened_app, say, seed_memory, wait_healthy
from tests.conftest import ROOT, free_port, server_env

NAMESPACE = {"agent_id": "ns-agent", "session_id": "ns-main"}
KINDS = ("fact", "fact", "decision", "preference", "constraint")
BATCH = 100
WRITTEN = 2_000  # memories written through memory_write at each size (the rest is seeded)


def items(rng: random.Random, count: int) -> list[dict[str, Any]]:
    return [{"kind": KINDS[i % len(KINDS)], "content": memory_text(rng)[0]} for i in range(count)]


def seed(store: Path, start: int, stop: int, rng: random.Random) -> None:
    """Save memories start..stop-1 of the namespace through the repository, in batches of 500."""
    with opened_app(store) as app:
        runtime = app.extensions["acn"]
        now = int(time.time() * 1000)
        for first in range(start, stop, 500):
            batch = [seed_memory(NAMESPACE, KINDS[i % len(KINDS)], memory_text(rng)[0], rng, now)
                     for i in range(first, min(stop, first + 500))]
            for memory in batch:
                memory.scope = "session"
            runtime.memories.save(DEFAULT_TENANT, batch)
        runtime.store.flush()


def write_phase(store: Path, count: int, rng: random.Random) -> tuple[float, float]:
    """Return (ms of the first call after a restart, items/s of the calls after it)."""
    with opened_app(store) as app:
        client = InProcess(app)
        times = []
        for _ in range(count // BATCH):
            body = {**NAMESPACE, "items": items(rng, BATCH)}
            started = time.perf_counter()
            client.post("memory_write", body)
            times.append(time.perf_counter() - started)
        app.extensions["acn"].store.flush()
    rest = times[1:] or times
    return times[0] * 1000, BATCH * len(rest) / sum(rest)


def search_phase(store: Path, rng: random.Random) -> tuple[float, float]:
    """Return (ms of the first memory_retrieve after a restart, p50 ms of the next 20)."""
    questions = [memory_text(rng)[1] for _ in range(21)]
    with opened_app(store) as app:
        time.sleep(1.5)  # jieba's dictionary loads in the background at start-up: a restarted server had it too
        client = InProcess(app)
        times = []
        for question in questions:
            started = time.perf_counter()
            client.post("memory_retrieve", {**NAMESPACE, "query": question})
            times.append((time.perf_counter() - started) * 1000)
    return times[0], statistics.median(times[1:])


@contextmanager
def server(store: Path, cache: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], float]]:
    port = free_port()
    env = server_env(ACN_MILVUS_URI=str(store), ACN_LOG_LEVEL="WARNING", ACN_CACHE_DIR=str(cache))
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(f"http://127.0.0.1:{port}", process)
        yield f"http://127.0.0.1:{port}", process, started
    finally:
        process.terminate()
        process.wait(timeout=300)


def cold_start(store: Path) -> float:
    """Return ms from launching server.py to its first memory_retrieve answer on the namespace."""
    with server(store, store.parent / "model-cache") as (base, _, started), closing(OverHttp(base)) as client:
        client.post("memory_retrieve", {**NAMESPACE, "query": "订单现在到哪了？"})
        return (time.perf_counter() - started) * 1000


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def agents_phase(folder: Path, agents: int, rng: random.Random) -> tuple[float, float]:
    """Return (RSS MB of a server on an empty store after one request, MB more after `agents` agents)."""
    cache = folder / "ns" / "model-cache"
    with server(folder / "agents" / "memory.db", cache) as (base, process, _), closing(OverHttp(base)) as client:
        client.post("memory_retrieve", {"agent_id": "warm", "session_id": "s", "query": "订单现在到哪了？"})
        empty = rss_mb(process.pid)
        for agent in range(agents):
            namespace = {"agent_id": f"agent-{agent}", "session_id": "s"}
            client.post("memory_write", {**namespace, "items": items(rng, 2)})
            client.post("memory_retrieve", {**namespace, "query": memory_text(rng)[1]})
            if agent and agent % 1000 == 0:
                say(f"{agent} agents: RSS {rss_mb(process.pid) - empty:+.0f} MB")
        time.sleep(1)
        grown = rss_mb(process.pid) - empty
        time.sleep(10)  # Lite compacts on a worker of its own after a flush: what is still held once it is done
        say(f"{agents} agents: RSS {grown:+.0f} MB 1 s after the last request, {rss_mb(process.pid) - empty:+.0f} MB "
            "11 s after")
        return empty, grown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="namespace sizes, comma-separated")
    parser.add_argument("--agents", type=int, default=5000, help="agents for the RSS figure (0: skip)")
    parser.add_argument("--cold-starts", type=int, default=2)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rng = random.Random(21)
    lines = ["| figure | " + " | ".join(f"{int(s):,}" for s in args.sizes.split(",")) + " |",
             "|---|" + "---|" * len(args.sizes.split(","))]
    cells: dict[str, list[str]] = {k: [] for k in ("first write call after restart (ms)",
                                                    "memory_write ×100 (items/s)",
                                                    "first search after restart (ms)", "search p50 after (ms)",
                                                    "cold start → first answer (ms)")}
    with tempfile.TemporaryDirectory(prefix="acn-ns-bench-") as tmp:
        folder, seeded = Path(tmp), 0
        store = folder / "ns" / "memory.db"
        for size in sorted(int(s) for s in args.sizes.split(",")):
            written = min(WRITTEN, size)
            say(f"{size:,}: seeding {size - written - seeded:,}")
            if size - written > seeded:
                seed(store, seeded, size - written, rng)
            say(f"{size:,}: writing {written:,} through memory_write")
            first, rate = write_phase(store, written, rng)
            seeded = size
            say(f"{size:,}: first search after restart")
            first_search, p50 = search_phase(store, rng)
            colds = [cold_start(store) for _ in range(args.cold_starts)]
            for key, value in zip(cells, (f"{first:,.0f}", f"{rate:,.0f}", f"{first_search:,.0f}", f"{p50:,.1f}",
                                          " / ".join(f"{c:,.0f}" for c in colds)), strict=True):
                cells[key].append(value)
            say(str(cells))
        lines += [f"| {key} | " + " | ".join(values) + " |" for key, values in cells.items()]
        if args.agents:
            empty, grown = agents_phase(folder, args.agents, rng)
            lines.append(f"| RSS: empty server {empty:,.0f} MB; after {args.agents:,} agents | {grown:+,.0f} MB |")
    load = os.getloadavg()[0]
    text = "\n".join(lines) + f"\n\nload average at the end: {load:.1f} (2 cores, shared)\n"
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
