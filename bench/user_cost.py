"""A returning user's cost (issue 48): a new conversation's first focused assemble for a user with few or many
earlier conversations.

Run: .venv/bin/python -m bench.user_cost                      # 3 and 300 earlier conversations
     .venv/bin/python -m bench.user_cost --conversations 3,30 --repeat 3 --restarts 1   # smoke

For each count N, on a fresh Lite file: one user of one agent has N earlier conversations of four turns each, as
a shop's customer would: a greeting, a new phone number (so every conversation supersedes the last one's: N
versions, N - 1 closed), a new preference ("我喜欢…", a user memory more each time) and an order of that
conversation (its own). Other users of the agent (20) have as many conversations as make the store's total the
same at every point (the largest N + 60): the process holds as many conversations either way, and only the
user's share differs. Then R new conversations of the user each make their first focused assemble
("给我推荐点零食吧", 1,000 tokens): timed in the process that wrote them (warm) and after a restart (the app
closed and opened again, timed once its start-up work is done, as /readyz reports it): the first one alone and
the median of the others. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from acn.common.settings import Settings
from acn.server import create_app

AGENT = "kefu"
USER = "u-returning"
OTHER_USERS = 20
QUESTION = "给我推荐点零食吧"
SNACKS = ["绿茶", "坚果", "薯片", "牛肉干", "果冻", "海苔", "饼干", "酸奶", "巧克力", "话梅", "红枣", "芒果干"]


def post(client: FlaskClient, node: str, body: dict[str, Any]) -> dict[str, Any]:
    response = client.post(f"/v1/nodes/{node}", json=body)
    if response.status_code != 200:
        raise RuntimeError(f"{node}: {response.status_code} {response.get_data(as_text=True)[:300]}")
    return dict(response.get_json())


def conversation(client: FlaskClient, user: str, session: str, n: int) -> None:
    """Record one earlier conversation of four turns."""
    ns = {"agent_id": AGENT, "session_id": session, "user_id": user}
    for text in ("你好", f"我的电话是 139{n:08d}", f"我喜欢{SNACKS[n % len(SNACKS)]}，尤其是第{n}款",
                 f"我的订单 A{n:06d} 还没发货，帮我催一下"):
        post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": text},
                                                        {"role": "assistant", "content": "好的，已记录。"}]})


def first_assemble(client: FlaskClient, session: str) -> tuple[float, float, str]:
    """Return a new conversation's first focused assemble: the CPU time the request's thread spent (ms: the
    machine's other load does not count; the test client runs the request on this thread), the wall time (ms) and
    its memory layer."""
    started, wall = time.thread_time(), time.perf_counter()
    body = post(client, "assemble", {"agent_id": AGENT, "session_id": session, "user_id": USER, "mode": "focused",
                                     "max_tokens": 1000, "user_input": QUESTION})
    return (time.thread_time() - started) * 1000, (time.perf_counter() - wall) * 1000, str(body["memory_text"])


def opened(store: Path, embedder: str) -> Flask:
    return create_app(Settings(milvus_uri=str(store / "memory.db"), log_level="WARNING",
                               cache_dir=str(store / "model-cache"), embedder=embedder))


def settled(app: Flask) -> None:
    """Wait for the start-up work a fresh process does in the background (heads listed, indexes warmed)."""
    runtime = app.extensions["acn"]
    cache = runtime.memories.cache
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and runtime.memories.heads.pending():
        time.sleep(0.05)
    if cache is not None:
        cache.settle()
    if runtime.warmer is not None:
        runtime.warmer.done.wait(60)


def build(store: Path, count: int, total: int, embedder: str, log: Callable[[str], None]) -> tuple[Flask, int]:
    """Write a store where the user has `count` earlier conversations (other users the rest of `total`); return
    the app that wrote it (still open: the warm process) and the user's user-scope rows."""
    app = opened(store, embedder)
    client = app.test_client()
    started = time.perf_counter()
    for n in range(total - count):
        other = n % OTHER_USERS
        conversation(client, f"u-other-{other}", f"o{other}-c{n}", n)
    for n in range(count):
        conversation(client, USER, f"c-{n}", n)
    log(f"{count} conversations written in {time.perf_counter() - started:.1f} s")
    listing = client.get("/v1/memories", query_string={"agent_id": AGENT, "user_id": USER, "scope": "user",
                                                        "include_superseded": "true", "limit": 1000}).get_json()
    settled(app)
    return app, len(listing["memories"])


Run = tuple[float, float, str]  # (CPU ms, wall ms, memory_text)


def alternated(apps: list[Flask], session: str, rounds: int, first_round: int = 0) -> list[list[Run]]:
    """Time each app's first assemble of a new conversation, `rounds` times, the apps' order reversed every round
    (so neither always runs first, after the other's work); return the runs per app."""
    runs: list[list[Run]] = [[] for _ in apps]
    for number in range(first_round, first_round + rounds):
        order = list(range(len(apps)))[::(-1 if number % 2 else 1)]
        for at in order:
            runs[at].append(first_assemble(apps[at].test_client(), f"{session}-{number}"))
    return runs


def ratios(runs: list[list[Run]], at: int) -> list[float]:
    """Return, per app after the first, the median over rounds of its time / the first app's (CPU: at 0, wall: 1)."""
    base = runs[0]
    return [statistics.median(run[at] / max(first[at], 1e-6) for run, first in zip(other, base, strict=True))
            for other in runs[1:]]


def measure(counts: list[int], total: int, repeat: int, restarts: int, embedder: str,
            log: Callable[[str], None]) -> dict[str, Any]:
    """Build one store per count, then time the first assembles alternately: in the processes that wrote them
    (warm), and after each of `restarts` restarts of them all (first: the first call after the restart; next: the
    ones after it)."""
    with tempfile.TemporaryDirectory() as folder:
        built = [build(Path(folder) / str(count), count, total, embedder, log) for count in counts]
        apps = [app for app, _ in built]
        warm = alternated(apps, "new-warm", repeat)
        first: list[list[Run]] = [[] for _ in apps]
        later: list[list[Run]] = [[] for _ in apps]
        for restart in range(restarts):
            for app in apps:
                app.extensions["acn"].close()
            apps = [opened(Path(folder) / str(count), embedder) for count in counts]
            for app in apps:
                settled(app)
            for at, runs in enumerate(alternated(apps, f"new-cold{restart}", 1, restart)):
                first[at] += runs
            for at, runs in enumerate(alternated(apps, f"new-next{restart}", max(1, repeat // restarts), restart)):
                later[at] += runs
        for app in apps:
            app.extensions["acn"].close()
    phones = [f"139{count - 1:08d}" for count in counts]
    answers = all(phone in run[2] for phone, *runs in zip(phones, warm, first, later, strict=True)
                  for series in runs for run in series)
    return {"counts": counts, "rows": [rows for _, rows in built], "warm": warm, "first": first, "next": later,
            "answers": answers}


def median_ms(runs: list[Run], at: int) -> float:
    return statistics.median(run[at] for run in runs)


def report(result: dict[str, Any], embedder: str, total: int) -> str:
    """Return the Markdown: per count, median CPU (wall) ms of each kind of first assemble; then the median ratios."""
    lines = [f"embedder {embedder}; {total} conversations in the store at every point ({OTHER_USERS} other users "
             "have the rest); first focused assemble of a new conversation: CPU ms of the request's thread (wall ms "
             "in brackets; medians over the new conversations)", "",
             "| earlier conversations | user-scope rows (live + superseded) | warm process | after a restart: first "
             "| after a restart: next |", "|---|---|---|---|---|"]
    for at, count in enumerate(result["counts"]):
        cells = [f"{median_ms(result[kind][at], 0):.1f} ({median_ms(result[kind][at], 1):.1f})"
                 for kind in ("warm", "first", "next")]
        lines.append(f"| {count} | {result['rows'][at]} | " + " | ".join(cells) + " |")
    lines.append("")
    base = result["counts"][0]
    for at, count in enumerate(result["counts"][1:]):
        parts = [f"{kind} {ratios(result[kind], 0)[at]:.2f}x (wall {ratios(result[kind], 1)[at]:.2f}x)"
                 for kind in ("warm", "first", "next")]
        lines.append(f"median ratio {count} / {base}, round by round (CPU): " + ", ".join(parts))
    lines.append(f"latest phone in every memory_text: {'yes' if result['answers'] else 'NO'}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", default="3,300",
                        help="comma-separated counts of earlier conversations (the first is the base of the ratios)")
    parser.add_argument("--repeat", type=int, default=9, help="alternating rounds in the warm process")
    parser.add_argument("--restarts", type=int, default=3, help="restarts (each gives one first call per store)")
    parser.add_argument("--embedder", default="none", help="ACN_EMBEDDER of the app (default none: BM25)")
    args = parser.parse_args()
    counts = [int(n) for n in args.conversations.split(",")]
    total = max(counts) + 60
    result = measure(counts, total, args.repeat, args.restarts, args.embedder, lambda m: print(m, flush=True))
    print("\n" + report(result, args.embedder, total))


if __name__ == "__main__":
    main()
