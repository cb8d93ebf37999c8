"""What Milvus Lite spends building vector indexes while chats play, in process (issue 47).

Lite 3 builds the index its collections ask for over every segment it flushes and every segment it compacts. A
Lite file's reads are answered by the in-process index (acn/storage/database/lite/held.py), so whatever Lite builds
is CPU on the cores the requests share. This plays `--chats` chats of bench.long_session turn by turn, in one
process, and prints per block of rounds the process's CPU a turn (Milvus Lite runs in it) and the CPU its index
builds took (HNSW graphs, FLAT copies), measured around Lite's own build function.

Run on two checkouts at once to compare (both see the same machine):
    .venv/bin/python -m bench.lite_index_cost [--chats 8] [--rounds 400] [--block 50] [--embedder use]
Not part of the test run.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.long_session import open_client, p50_p95, play, report


@contextmanager
def index_builds() -> Iterator[list[float]]:
    """Count the calling thread's CPU inside Lite's index builds (the factory every segment's index goes through);
    yield a one-element list holding the seconds so far. The factory is put back afterwards."""
    import milvus_lite.index.factory as factory

    spent = [0.0]
    original: Callable[..., Any] = factory.build_index_from_spec

    def build(*args: Any, **kwargs: Any) -> Any:
        started = time.thread_time()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.thread_time() - started

    factory.build_index_from_spec = build
    try:
        yield spent
    finally:
        factory.build_index_from_spec = original


def run(chats: int, rounds: int, block: int, embedder: str) -> str:
    """Play `rounds` turns of each chat, interleaved; return the Markdown table of the blocks."""
    lines = [f"### {chats} chats × {rounds} turns interleaved, `{embedder}`, in process "
             f"({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)", "",
             "| rounds | process CPU ms a turn | Lite index builds, CPU ms a turn | assemble p50 / p95 ms | "
             "record_turn p50 / p95 ms |", "|---|---|---|---|---|"]
    total = built_total = 0.0
    rngs = [random.Random(chat) for chat in range(chats)]
    with tempfile.TemporaryDirectory() as folder, open_client(embedder, False, folder) as post, \
            index_builds() as built:
        for start in range(1, rounds + 1, block):
            stop = min(rounds, start + block - 1)
            cpu, before = time.process_time(), built[0]
            timings = [t for turn in range(start, stop + 1) for chat in range(chats)
                       for t in play(post, f"chat-{chat}", range(turn, turn + 1), rngs[chat])]
            cpu, builds = time.process_time() - cpu, built[0] - before
            total, built_total = total + cpu, built_total + builds
            lines.append(f"| {start}–{stop} | {cpu * 1000 / len(timings):.1f} | {builds * 1000 / len(timings):.2f} | "
                         f"{p50_p95([t[1] for t in timings])} | {p50_p95([t[2] for t in timings])} |")
            print(lines[-1], flush=True)
    lines += ["", f"Whole run: {total:.1f} s of process CPU, {built_total:.2f} s of it in Lite's index builds."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chats", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=400, help="turns of each chat")
    parser.add_argument("--block", type=int, default=50, help="rounds a row of the table")
    parser.add_argument("--embedder", default="use")
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args()
    if min(args.chats, args.rounds, args.block) < 1:
        parser.error("--chats, --rounds and --block must be at least 1")
    report(run(args.chats, args.rounds, args.block, args.embedder), args.out)


if __name__ == "__main__":
    main()
