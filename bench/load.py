"""Bounded loopback load: concurrent clients mixing record_turn, memory_retrieve and assemble.

Run: .venv/bin/python -m bench.load [--clients 8] [--requests 1200]
Each client owns a session; it stops after its share of requests. Afterwards every session is read back:
lost writes = acknowledged record_turn calls whose turn is missing from the session.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import requests

from tests.conftest import serving

MIX = ("record_turn", "record_turn", "memory_retrieve", "assemble")


def client_loop(base: str, client: int, count: int, results: dict[str, list[float]], errors: list[str],
                acknowledged: dict[int, list[int]], lock: threading.Lock) -> None:
    """Send `count` requests for one session, rotating through the mix."""
    session = requests.Session()
    ns = {"agent_id": "load", "session_id": f"client-{client}"}
    for i in range(count):
        node = MIX[i % len(MIX)]
        body: dict[str, Any] = dict(ns)
        if node == "record_turn":
            body["messages"] = [{"role": "user", "content": f"第{i}条：订单 ORD-{client}-{i:05d} 金额 {i * 3}元"},
                                {"role": "assistant", "content": f"已记录订单 ORD-{client}-{i:05d}"}]
        elif node == "memory_retrieve":
            body["query"] = f"之前的订单 ORD-{client}-{max(0, i - 8):05d} 金额是多少"
        else:
            body.update(user_input="总结一下我的订单", max_tokens=1500)
        started = time.perf_counter()
        try:
            response = session.post(f"{base}/v1/nodes/{node}", json=body, timeout=60)
        except requests.RequestException as error:
            with lock:
                errors.append(f"{node}: {error}")
            continue
        elapsed = (time.perf_counter() - started) * 1000
        with lock:
            results[node].append(elapsed)
            if response.status_code != 200:
                errors.append(f"{node}: {response.status_code} {response.text[:200]}")
            elif node == "record_turn":
                acknowledged[client].append(response.json()["turn"])
    session.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def run(clients: int, total: int) -> str:
    """Run the load against a fresh server and return the report."""
    with serving() as base:
        results: dict[str, list[float]] = defaultdict(list)
        errors: list[str] = []
        acknowledged: dict[int, list[int]] = defaultdict(list)
        lock = threading.Lock()
        per_client = total // clients
        threads = [threading.Thread(target=client_loop, args=(base, c, per_client, results, errors,
                                                              acknowledged, lock)) for c in range(clients)]
        wall = run_threads(threads)
        lost = count_lost(base, acknowledged)
    return report(results, errors, lost, wall, clients)


def run_threads(threads: list[threading.Thread]) -> float:
    """Start every client thread, wait for all of them, and return the wall time in seconds."""
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def count_lost(base: str, acknowledged: dict[int, list[int]]) -> int:
    """Return acknowledged turns missing from their session's archived turns."""
    lost = 0
    for client, turns in acknowledged.items():
        page = requests.get(f"{base}/v1/memories", timeout=60, params={
            "agent_id": "load", "session_id": f"client-{client}", "kinds": "turn", "limit": 1000}).json()
        archived = {m["turn_range"][0] for m in page["memories"]}
        lost += len(set(turns) - archived)
    return lost


def report(results: dict[str, list[float]], errors: list[str], lost: int, wall: float, clients: int) -> str:
    """Return the Markdown report."""
    count = sum(len(v) for v in results.values())
    lines = [f"{clients} clients, {count} requests in {wall:.1f} s: {count / wall:.1f} req/s, errors {len(errors)}, "
             f"lost writes {lost} ({time.strftime('%Y-%m-%d')}, `python -m bench.load`)", "",
             "| node | requests | p50 ms | p95 ms | p99 ms | mean ms |", "|---|---|---|---|---|---|"]
    for node, values in sorted(results.items()):
        lines.append(f"| {node} | {len(values)} | {percentile(values, 0.5):.1f} | {percentile(values, 0.95):.1f} | "
                     f"{percentile(values, 0.99):.1f} | {statistics.mean(values):.1f} |")
    lines += [f"- {error}" for error in errors[:10]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=1200)
    args = parser.parse_args()
    text = run(args.clients, args.requests)
    print(text)
    (Path(__file__).resolve().parent / "results" / "load.md").write_text(text + "\n", encoding="utf-8")
    if "errors 0," not in text or "lost writes 0 " not in text:
        sys.exit(1)


if __name__ == "__main__":
    main()
