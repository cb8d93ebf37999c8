"""A returning user's cost (issue 48): a new conversation's first focused assemble for a user with few or many
earlier conversations.

Run: .venv/bin/python -m bench.user_cost                      # 3 and 300 earlier conversations
     .venv/bin/python -m bench.user_cost --conversations 3,30 --repeat 3   # smoke

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


def measure(count: int, total: int, repeat: int, embedder: str, log: Callable[[str], None]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        store = Path(folder)
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
        user_rows = len(listing["memories"])
        settled(app)
        warm = [first_assemble(client, f"new-warm-{r}") for r in range(repeat)]
        app.extensions["acn"].close()
        app = opened(store, embedder)
        settled(app)
        client = app.test_client()
        cold = [first_assemble(client, f"new-cold-{r}") for r in range(repeat)]
        app.extensions["acn"].close()
    phone = f"139{count - 1:08d}"
    def median(runs: list[tuple[float, float, str]], at: int) -> float:
        return statistics.median(run[at] for run in runs)

    return {"count": count, "user_rows": user_rows, "warm": median(warm, 0), "warm_wall": median(warm, 1),
            "restart_first": cold[0][0], "restart_first_wall": cold[0][1],
            "restart_next": median(cold[1:] or cold, 0), "restart_next_wall": median(cold[1:] or cold, 1),
            "answers": all(phone in run[2] for run in warm + cold)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", default="3,300", help="comma-separated counts of earlier conversations")
    parser.add_argument("--repeat", type=int, default=5, help="new conversations timed at each point")
    parser.add_argument("--embedder", default="none", help="ACN_EMBEDDER of the app (default none: BM25)")
    args = parser.parse_args()
    counts = [int(n) for n in args.conversations.split(",")]
    total = max(counts) + 60
    rows = [measure(n, total, args.repeat, args.embedder, lambda m: print(m, flush=True)) for n in counts]
    print(f"\nembedder {args.embedder}; {total} conversations in the store at every point ({OTHER_USERS} other users "
          "have the rest); first focused assemble of a new conversation: CPU ms of the request's thread (wall ms "
          "in brackets; medians over the new conversations)\n")
    print("| earlier conversations | user-scope rows (live + superseded) | warm process | after a restart: first "
          "| after a restart: next | latest phone in memory_text |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['count']} | {row['user_rows']} | {row['warm']:.1f} ({row['warm_wall']:.1f}) | "
              f"{row['restart_first']:.1f} ({row['restart_first_wall']:.1f}) | {row['restart_next']:.1f} "
              f"({row['restart_next_wall']:.1f}) | {'yes' if row['answers'] else 'NO'} |")
    if len(rows) > 1:
        base, top = rows[0], rows[-1]
        print(f"\nratio {top['count']} / {base['count']} (CPU): warm {top['warm'] / base['warm']:.2f}x, "
              f"after a restart first {top['restart_first'] / base['restart_first']:.2f}x, next "
              f"{top['restart_next'] / base['restart_next']:.2f}x")


if __name__ == "__main__":
    main()
