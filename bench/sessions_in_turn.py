"""Chats served in turn against the read cache: does every session stay held as they grow? (issue 47)

`chats` chats of bench.long_session's number-rich chat, one turn of each in turn (as concurrent clients interleave
their turns), in process on a Lite file with ACN_READ_CACHE_MB as given. Per block of turns it prints the turn's
p50 / p95 (a focused assemble and a record_turn), how many session indexes the read cache holds and its estimated
MB. When the sessions no longer fit, each turn loads its session again (least recently used first out: in turn,
every one): the p50 jumps several times.

Run: .venv/bin/python -m bench.sessions_in_turn [--chats 8] [--turns 400] [--read-cache-mb 64] [--embedder use]
     .venv/bin/python -m bench.sessions_in_turn --compare ../before   # the same on another checkout, first
A quarter of 32 chats of 1,000 turns at the 256 MB of before: 8 chats against 64 MB. Not part of the test run.
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
from pathlib import Path

from bench.long_session import BUDGET, answer_message, percentile, report, user_message


def served(chats: int, turns: int, read_cache_mb: int, embedder: str, every: int) -> list[str]:
    """Serve the chats in turn; return one Markdown row per block of `every` turns of every chat."""
    from acn.common.settings import Settings
    from acn.server import create_app

    rows = []
    with tempfile.TemporaryDirectory() as folder:
        app = create_app(Settings(milvus_uri=str(Path(folder) / "memory.db"), log_level="WARNING", embedder=embedder,
                                  read_cache_mb=read_cache_mb))
        client, runtime = app.test_client(), app.extensions["acn"]
        rngs = [random.Random(chat) for chat in range(chats)]
        try:
            took: list[float] = []
            for turn in range(1, turns + 1):
                for chat in range(chats):
                    namespace = {"agent_id": "kefu", "session_id": f"chat-{chat}"}
                    user = user_message(turn, rngs[chat])
                    started = time.perf_counter()
                    context = client.post("/v1/nodes/assemble", json={
                        **namespace, "mode": "focused", "max_tokens": BUDGET, "user_input": user}).get_json()
                    recorded = client.post("/v1/nodes/record_turn", json={**namespace, "messages": [
                        {"role": "user", "content": user},
                        {"role": "assistant", "content": answer_message(turn, rngs[chat])}]}).get_json()
                    took.append((time.perf_counter() - started) * 1000)
                    if not (context.get("ok") and recorded.get("ok")):
                        raise SystemExit(f"turn {turn} of chat {chat}: {context} {recorded}")
                if turn % every == 0 or turn == turns:
                    cache = runtime.memories.cache
                    rows.append(f"| {turn - (turn - 1) % every}–{turn} | {statistics.median(took):.1f} / "
                                f"{percentile(took, 0.95):.1f} | {len(cache.indexes)} | {cache.nbytes() / 2**20:.0f} |")
                    print(rows[-1], flush=True)
                    took = []
        finally:
            runtime.close()
    return rows


def table(title: str, rows: list[str]) -> str:
    return "\n".join([title, "", "| turns | turn p50 / p95 ms | sessions held | read cache MB |",
                      "|---|---|---|---|", *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=8)
    parser.add_argument("--turns", type=int, default=400)
    parser.add_argument("--every", type=int, default=50)
    parser.add_argument("--read-cache-mb", type=int, default=64)
    parser.add_argument("--embedder", default="use")
    parser.add_argument("--compare", type=Path, help="another checkout (before a change): the same run there first")
    parser.add_argument("--rows-only", action="store_true", help=argparse.SUPPRESS)  # what --compare's child prints
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args()
    if min(args.chats, args.turns, args.every, args.read_cache_mb) < 1:
        parser.error("--chats, --turns, --every and --read-cache-mb must be at least 1")
    title = (f"### {args.chats} chats served in turn, `{args.embedder}`, in process, ACN_READ_CACHE_MB "
             f"{args.read_cache_mb}")
    tables = []
    if args.compare:
        child = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--rows-only", "--chats", str(args.chats), "--turns",
             str(args.turns), "--every", str(args.every), "--read-cache-mb", str(args.read_cache_mb), "--embedder",
             args.embedder], cwd=args.compare, env={**os.environ, "PYTHONPATH": str(args.compare.resolve())},
            capture_output=True, text=True, check=True)
        tables.append(table(f"{title}: {args.compare}", [line for line in child.stdout.splitlines()
                                                          if line.startswith("| ")]))
    rows = served(args.chats, args.turns, args.read_cache_mb, args.embedder, args.every)
    if args.rows_only:
        return
    tables.append(table(f"{title}: this checkout" if args.compare else title, rows))
    report("\n\n".join(tables), args.out)


if __name__ == "__main__":
    main()
