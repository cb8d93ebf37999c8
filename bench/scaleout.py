"""Several server processes on one Milvus: the cost of the Redis session lease, and 1 vs 3 processes.

Run: .venv/bin/python -m bench.scaleout [--turns 120] [--out bench/results/scaleout.md]
Needs redis-server (`make redis`). Everything runs on loopback: a Milvus Lite server, redis-server, replicas.

1. Latency: two replicas on the same Milvus, one with ACN_REDIS_URL and one without; one client alternates
   record_turn calls between them (its own session on each), so machine noise hits both alike.
   Server time is the replica's own Server-Timing; client time includes HTTP.
2. Throughput: 12 clients, each on its own session, against 1 replica and then 3 replicas (with Redis).
3. Correctness: 12 clients over 4 shared sessions on 3 replicas, with and without Redis: acknowledged turns lost.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from bench.load import run_threads
from tests.conftest import free_port, wait_for_port
from tests.redis_support import redis_server, replicas

CLIENTS = 12


@contextmanager
def lite_server() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as folder:
        port = free_port()
        process = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir", folder,
                                    "--host", "127.0.0.1", "--port", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_for_port(port, process=process)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)


def turn(agent: str, session: str, text: str) -> dict[str, Any]:
    return {"agent_id": agent, "session_id": session, "messages": [{"role": "user", "content": text}],
            "edit": False, "extract": False, "compact": False}


def server_ms(response: requests.Response) -> float:
    return float(response.headers["Server-Timing"].split("dur=")[1])


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def latency(milvus: str, redis_url: str, turns: int) -> dict[str, dict[str, float]]:
    samples: dict[str, dict[str, list[float]]] = {"redis": {"server": [], "client": []},
                                                  "none": {"server": [], "client": []}}
    with replicas(milvus, 1, ACN_REDIS_URL=redis_url) as locked, replicas(milvus, 1) as unlocked:
        http = requests.Session()
        targets = {"redis": locked[0][0], "none": unlocked[0][0]}
        for index in range(turns + 10):
            for name, base in targets.items():
                started = time.perf_counter()
                answer = http.post(f"{base}/v1/nodes/record_turn", json=turn("lat", name, f"turn {index}"),
                                   timeout=60)
                elapsed = (time.perf_counter() - started) * 1000
                answer.raise_for_status()
                if index >= 10:  # warm-up turns (first writes, jieba, connections) are not counted
                    samples[name]["server"].append(server_ms(answer))
                    samples[name]["client"].append(elapsed)
        http.close()
    return {name: {f"{kind} p{int(share * 100)}": percentile(values, share)
                   for kind, values in kinds.items() for share in (0.5, 0.95)}
            for name, kinds in samples.items()}


def lease_cost(redis_url: str, rounds: int = 1000) -> dict[str, float]:
    """Time one lease cycle as a commit pays it: take, fencing check, release (three Redis scripts)."""
    from acn.storage.repositories.coordination import RedisCoordinator

    coordinator = RedisCoordinator(redis_url, prefix="bench")
    times = []
    try:
        for index in range(rounds):
            started = time.perf_counter()
            with coordinator.hold(f"session-{index % 16}") as lease:
                coordinator.check(lease)
            times.append((time.perf_counter() - started) * 1000)
    finally:
        coordinator.close()
    return {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95)}


def storm(urls: list[str], agent: str, turns: int, shared: bool) -> dict[str, float]:
    """12 clients, round-robin over the replicas; per-client sessions, or 4 shared ones."""
    acked: dict[str, list[str]] = {}
    errors: list[str] = []
    lock = threading.Lock()

    def client(number: int) -> None:
        http = requests.Session()
        session = f"s{number % 4}" if shared else f"c{number}"
        for index in range(turns):
            text = f"client {number} turn {index}"
            try:
                answer = http.post(f"{urls[(number + index) % len(urls)]}/v1/nodes/record_turn",
                                   json=turn(agent, session, text), timeout=60)
            except requests.RequestException as error:
                with lock:
                    errors.append(str(error))
                continue
            with lock:
                if answer.status_code == 200:
                    acked.setdefault(session, []).append(text)
                else:
                    errors.append(f"{answer.status_code} {answer.text[:100]}")
        http.close()

    threads = [threading.Thread(target=client, args=(number,)) for number in range(CLIENTS)]
    wall = run_threads(threads)
    lost = 0
    for session, texts in acked.items():
        state = requests.post(f"{urls[0]}/v1/nodes/session_state", json={"agent_id": agent, "session_id": session},
                              timeout=60).json()
        kept = {m["content"] for m in state["buffer"]}
        lost += sum(1 for text in texts if text not in kept)
    total = sum(len(texts) for texts in acked.values())
    return {"acknowledged": total, "errors": len(errors), "lost": lost, "seconds": wall, "turns/s": total / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=120, help="latency samples per side")
    parser.add_argument("--storm-turns", type=int, default=10, help="turns per client in each storm")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    lines = ["# Scale-out: Redis session lease cost, 1 vs 3 processes", ""]
    with lite_server() as milvus, redis_server() as redis:
        lat = latency(milvus, redis.url, args.turns)
        lines += ["## record_turn latency, one replica each, alternating (ms)", "",
                  "| lease | server p50 | server p95 | client p50 | client p95 |", "|---|---|---|---|---|"]
        for name in ("none", "redis"):
            row = lat[name]
            lines.append(f"| {name} | {row['server p50']:.1f} | {row['server p95']:.1f} | {row['client p50']:.1f} "
                         f"| {row['client p95']:.1f} |")
        delta = lat["redis"]["server p95"] - lat["none"]["server p95"]
        median = lat["redis"]["server p50"] - lat["none"]["server p50"]
        cost = lease_cost(redis.url)
        lines += ["", f"Server difference (redis − none): p50 {median:+.1f} ms, p95 {delta:+.1f} ms over {args.turns} "
                  "turns each.", f"One lease cycle alone (take + fencing check + release, 1,000 cycles): "
                  f"p50 {cost['p50']:.2f} ms, p95 {cost['p95']:.2f} ms.", ""]
        lines += ["## Throughput and correctness, 12 clients, record_turn only", "",
                  "| replicas | lease | sessions | acknowledged | errors | lost | turns/s |",
                  "|---|---|---|---|---|---|---|"]
        env = {"ACN_REDIS_URL": redis.url}
        for count, lease, shared in ((1, True, False), (3, True, False), (3, True, True), (3, False, True)):
            with replicas(milvus, count, **(env if lease else {})) as servers:
                agent = f"storm-{count}-{lease}-{shared}-{time.monotonic_ns()}"
                result = storm([url for url, _ in servers], agent, args.storm_turns, shared)
            lines.append(f"| {count} | {'redis' if lease else 'none'} | {'4 shared' if shared else '12 own'} | "
                         f"{result['acknowledged']:.0f} | {result['errors']:.0f} | {result['lost']:.0f} | "
                         f"{result['turns/s']:.1f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
