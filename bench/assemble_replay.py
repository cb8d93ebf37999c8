"""Focused assembles replayed on a chat's stored state: what an assemble costs at turn N, writes left out (issue 47).

bench.long_session's number-rich chat is played to each turn asked for (--at 200,3000) once, in process, into a
folder kept for the run. Each replay then opens a copy of it in a new process (the session index loaded from the Lite
file, as after a restart), asks 20 focused assembles to warm it, and times the next `count` ones (the chat's next
user messages, nothing recorded in between): the request thread's CPU time, p50 and mean. With --compare, another
checkout replays the same states in turn with this one, round by round: pair by pair ratios say what a change did,
on a machine whose speed drifts. Without writes the figure is the assemble's own: no compaction, no Lite flush.

Run: .venv/bin/python -m bench.assemble_replay [--at 200,3000] [--count 200] [--rounds 3] [--embedder use]
     .venv/bin/python -m bench.assemble_replay --compare ../before --rounds 6 --at 3000
Not part of the test run (building turn 3,000 takes ~3 minutes, a replay ~20 s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.long_session import BUDGET, open_client, play, report, user_message

WARM = 20  # assembles before the timed ones: the session index loaded and the caches filled


def build(embedder: str, turns: int, folder: Path) -> None:
    """Play the chat to `turns` into `folder` (a Lite file and its files)."""
    with open_client(embedder, False, str(folder)) as post:
        play(post, "long", range(1, turns + 1), random.Random(7))


def replay(embedder: str, state: Path, first: int, count: int) -> list[float]:
    """Return the CPU ms of each of `count` focused assembles (turns first, first + 1, ...) on a copy of `state`."""
    with tempfile.TemporaryDirectory() as folder:
        shutil.copytree(state, folder, dirs_exist_ok=True)
        with open_client(embedder, False, folder) as post:
            rng = random.Random(first)
            ask = {"agent_id": "kefu", "session_id": "long", "mode": "focused", "max_tokens": BUDGET}
            for turn in range(first - WARM, first):
                post("/v1/nodes/assemble", {**ask, "user_input": user_message(turn, rng)})
            took = []
            for turn in range(first, first + count):
                started = time.thread_time()
                answer = post("/v1/nodes/assemble", {**ask, "user_input": user_message(turn, rng)})
                took.append((time.thread_time() - started) * 1000)
                if not answer.get("ok"):
                    raise SystemExit(f"turn {turn}: {json.dumps(answer)[:300]}")
    return took


def replay_in(checkout: Path, embedder: str, state: Path, first: int, count: int) -> list[float]:
    """Run `replay` in a new process of `checkout` (this one or another; this file runs there, with that checkout's
    acn and bench.long_session, so a checkout from before this benchmark replays too); return its timings."""
    child = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(state), "--first", str(first), "--count",
         str(count), "--embedder", embedder], cwd=checkout, env={**os.environ, "PYTHONPATH": str(checkout)},
        capture_output=True, text=True, check=True)
    timings: list[float] = json.loads(child.stdout.strip().splitlines()[-1])
    return timings


def rounds_table(embedder: str, turns: list[int], count: int, rounds: int, other: Path | None) -> str:
    """Build each state, replay it `rounds` times (in turn with `other` when given); return the Markdown table."""
    here = Path.cwd().resolve()
    compared = f" (before = {other}, after = this checkout, in turn)" if other else ""
    columns = ", before | after | after / before by round (p50)" if other else ""
    lines = [f"### Focused assembles replayed on the stored chat, `{embedder}`, in process, {count} a replay, "
             f"{rounds} rounds{compared}", "", f"| turn | CPU ms p50 / mean{columns} |",
             "|---|---|" + ("---|---|" if other else "")]
    with tempfile.TemporaryDirectory() as scratch:
        for at in turns:
            state = Path(scratch) / f"turn-{at}"
            build(embedder, at, state)
            before: list[list[float]] = []
            after: list[list[float]] = []
            for _ in range(rounds):
                if other is not None:
                    before.append(replay_in(other.resolve(), embedder, state, at + 1, count))
                after.append(replay_in(here, embedder, state, at + 1, count))
            cells = [figures(after)]
            if other is not None:
                ratios = [statistics.median(a) / statistics.median(b) for a, b in zip(after, before, strict=True)]
                cells = [figures(before), figures(after), " ".join(f"{r:.2f}" for r in ratios)]
            lines.append(f"| {at} | " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def figures(runs: list[list[float]]) -> str:
    """Return the median over rounds of each round's p50 and mean."""
    return (f"{statistics.median(statistics.median(r) for r in runs):.2f} / "
            f"{statistics.median(statistics.fmean(r) for r in runs):.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--at", default="200,3000", help="the turns whose state is replayed")
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embedder", default="use")
    parser.add_argument("--compare", type=Path, help="another checkout (before a change), replayed in turn")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)  # a replay in this process, for replay_in
    parser.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(replay(args.embedder, args.child, args.first, args.count)))
        return
    turns = [int(turn) for turn in args.at.split(",") if turn.strip()]
    if min([args.count, args.rounds, *turns], default=0) < 1 or min(turns) <= WARM:
        parser.error(f"--count and --rounds must be at least 1, and every --at turn above {WARM}")
    report(rounds_table(args.embedder, turns, args.count, args.rounds, args.compare), args.out)


if __name__ == "__main__":
    main()
