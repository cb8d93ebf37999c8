"""A number-rich customer-service chat to turn 3,000: does a turn cost the same late as early? (issue 47)

Each turn: a focused `assemble` (max_tokens 1,500) with the user's message, then `record_turn` with the message
and the answer. Every user message carries a new order number and amount, every answer a ticket number and a
date; at turn 40 the user gives a delivery phone number, asked for again at the end.

Run: .venv/bin/python -m bench.long_session [--turns 3000] [--embedder none|use] [--every 100] [--http]
     .venv/bin/python -m bench.long_session --concurrent 32 --turns 1000 --short 50 [--short-every 4]
     .venv/bin/python -m bench.long_session --compare ../before --compare-turns 800   # two servers, in turn
Prints p50 / p95 of both calls per block of turns, RSS and the stored state's size. Not part of the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PHONE_TURN = 40
PHONE = "13957614382"
PHONE_QUESTION = "我的收货电话是多少？"
BUDGET = 1500


def user_message(turn: int, rng: random.Random) -> str:
    """Return the user's message of one turn: a new order number and amount each time."""
    if turn == PHONE_TURN:
        return f"第{turn}轮：我的收货电话改成 {PHONE}，以后都寄到这个号码"
    return f"第{turn}轮：我的订单号 {rng.randint(10000, 99999)} 怎么样了？上次说的金额是 {rng.randint(10, 999)} 元"


def answer_message(turn: int, rng: random.Random) -> str:
    """Return the agent's answer: a ticket number and a promised date."""
    month, day = rng.randint(1, 12), rng.randint(1, 28)
    return f"已为您登记工单 T{rng.randint(100000, 999999)}，预计 {month}月{day}日 前处理完毕。"


Post = Callable[[str, dict[str, Any]], dict[str, Any]]


@contextmanager
def open_client(embedder: str, http: bool, folder: str, checkout: Path | None = None,
                pids: list[int] | None = None) -> Iterator[Post]:
    """Yield a post(path, body) -> json over the in-process app, or over HTTP to `python server.py` (of
    `checkout`, another checkout of the project, when given; its process id is appended to `pids`)."""
    if http or checkout is not None:
        yield from _http_client(embedder, folder, checkout or Path.cwd(), pids)
        return
    from acn.common.settings import Settings
    from acn.server import create_app

    app = create_app(Settings(milvus_uri=str(Path(folder) / "memory.db"), log_level="WARNING", embedder=embedder))
    client = app.test_client()

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        answer: dict[str, Any] = client.post(path, json=body).get_json()
        return answer

    try:
        yield post
    finally:
        app.extensions["acn"].close()


def _http_client(embedder: str, folder: str, checkout: Path, pids: list[int] | None = None) -> Iterator[Post]:
    import subprocess
    import sys

    import requests

    from tests.conftest import free_port

    port = free_port()
    env = {**os.environ, "ACN_MILVUS_URI": str(Path(folder) / "memory.db"), "ACN_EMBEDDER": embedder,
           "ACN_LOG_LEVEL": "WARNING"}
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], env=env, cwd=checkout)
    if pids is not None:
        pids.append(process.pid)
    session = requests.Session()
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if session.get(f"{base}/readyz", timeout=2).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            time.sleep(0.2)

        def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
            answer: dict[str, Any] = session.post(base + path, json=body, timeout=60).json()
            return answer

        yield post
    finally:
        process.terminate()
        process.wait(30)


def percentile(values: list[float], share: float) -> float:
    """Return the nearest-rank percentile of values."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(share * (len(ordered) - 1))))]


def play(post: Post, session_id: str, turns: range, rng: random.Random) -> list[tuple[int, float, float]]:
    """Play these turns of one chat; return (turn, assemble ms, record_turn ms) for each."""
    ns = {"agent_id": "kefu", "session_id": session_id}
    timings = []
    for turn in turns:
        user = user_message(turn, rng)
        started = time.perf_counter()
        context = post("/v1/nodes/assemble", {**ns, "mode": "focused", "max_tokens": BUDGET, "user_input": user})
        assembled = time.perf_counter()
        recorded = post("/v1/nodes/record_turn", {**ns, "messages": [
            {"role": "user", "content": user}, {"role": "assistant", "content": answer_message(turn, rng)}]})
        done = time.perf_counter()
        if not (context.get("ok") and recorded.get("ok")):
            raise SystemExit(f"turn {turn}: {json.dumps(context)[:300]} {json.dumps(recorded)[:300]}")
        timings.append((turn, (assembled - started) * 1000, (done - assembled) * 1000))
    return timings


def state_size(post: Post, session_id: str) -> tuple[int, int]:
    """Return (session_state bytes, segments) of a session."""
    state = post("/v1/nodes/session_state", {"agent_id": "kefu", "session_id": session_id})
    return len(json.dumps(state, ensure_ascii=False).encode()), len(state.get("segments", []))


def p50_p95(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} / {percentile(values, 0.95):.1f}"


def one_long(turns: int, embedder: str, every: int, http: bool) -> str:
    """Run one chat to `turns`, return the Markdown table per block of `every` turns."""
    lines = [f"### One chat, `{embedder}`, {'HTTP' if http else 'in process'}, focused assemble at {BUDGET} tokens",
             "", "| turns | assemble p50 / p95 ms | record_turn p50 / p95 ms | RSS MB | state KB | segments |",
             "|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder, open_client(embedder, http, folder) as post:
        rng = random.Random(7)
        for start in range(1, turns + 1, every):
            block = play(post, "long", range(start, min(turns, start + every - 1) + 1), rng)
            size, segments = state_size(post, "long")
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # in process only: the server's
            lines.append(f"| {block[0][0]}–{block[-1][0]} | {p50_p95([b[1] for b in block])} | "
                         f"{p50_p95([b[2] for b in block])} | {rss if not http else float('nan'):.0f} | "
                         f"{size / 1024:.0f} | {segments} |")
            print(lines[-1], flush=True)
        answer = post("/v1/nodes/assemble", {"agent_id": "kefu", "session_id": "long", "mode": "focused",
                                             "max_tokens": BUDGET, "user_input": PHONE_QUESTION})
        found = PHONE in answer.get("prompt", "")
        lines += ["", f"Turn {turns + 1}: \"{PHONE_QUESTION}\" → the phone number from turn {PHONE_TURN} "
                  f"{'is' if found else 'is NOT'} in the focused context."]
        print(lines[-1], flush=True)
    return "\n".join(lines)


def compare(other: Path, other_turns: int, turns: int, embedder: str, every: int) -> str:
    """Play the same chat on `python server.py` of this checkout and of `other` (e.g. main before a change), a
    block of `every` turns each in turn, so both see the same machine; `other` stops at `other_turns`."""
    lines = [f"### The same chat on two servers, `{embedder}`, HTTP, blocks of {every} turns taken in turn",
             f"(before = {other}, to turn {other_turns}; after = this checkout)", "",
             "| turns | assemble p50 / p95 ms, before | after | record_turn p50 / p95 ms, before | after |",
             "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as folder_a, tempfile.TemporaryDirectory() as folder_b, \
            open_client(embedder, True, folder_a, other) as before, open_client(embedder, True, folder_b) as after:
        rng_before, rng_after = random.Random(7), random.Random(7)
        for start in range(1, turns + 1, every):
            span = range(start, min(turns, start + every - 1) + 1)
            old = play(before, "long", span, rng_before) if start <= other_turns else []
            new = play(after, "long", span, rng_after)
            cells = [p50_p95([t[i] for t in old]) if old else "–" for i in (1, 2)]
            lines.append(f"| {span[0]}–{span[-1]} | {cells[0]} | {p50_p95([t[1] for t in new])} | {cells[1]} | "
                         f"{p50_p95([t[2] for t in new])} |")
            print(lines[-1], flush=True)
    return "\n".join(lines)


def serve_chats(post: Post, chats: int, turns: range, prefix: str,
                rngs: list[random.Random]) -> tuple[list[tuple[int, float, float]], float]:
    """Play these turns of `chats` chats at once (ids prefix-0, prefix-1, ...; `rngs` carry each chat's messages
    from one call to the next); return every turn's timings and the seconds it took."""
    started = time.perf_counter()
    with ThreadPoolExecutor(chats) as pool:
        done = list(pool.map(lambda index: play(post, f"{prefix}-{index}", turns, rngs[index]), range(chats)))
    return [t for chat in done for t in chat], time.perf_counter() - started


@dataclass
class Stretch:
    """One timed stretch of a concurrent run: its turns' timings, wall seconds and the server's CPU seconds."""

    timings: list[tuple[int, float, float]]
    elapsed: float
    cpu: float

    @property
    def rate(self) -> float:
        return len(self.timings) / self.elapsed

    @property
    def cpu_ms(self) -> float:
        return self.cpu * 1000 / len(self.timings)


def timed(post: Post, pid: int, chats: int, turns: range, prefix: str, rngs: list[random.Random]) -> Stretch:
    cpu = process_cpu_seconds(pid)
    timings, elapsed = serve_chats(post, chats, turns, prefix, rngs)
    return Stretch(timings, elapsed, process_cpu_seconds(pid) - cpu)


def concurrent(chats: int, long_turns: int, short_turns: int, embedder: str, every: int = 4) -> str:
    """Serve `chats` chats of `long_turns` turns on one server, `short_turns` turns at a time, and after every
    `every`-th stretch `chats` new chats of `short_turns` turns on a second server, over HTTP; return turns/s and
    the server's CPU a turn (all its threads) of both, and their ratio.

    Side by side in one run: each short run is beside the long stretch before it, so a change in the machine's
    load moves both (run one after the other, two runs of 32 × 50 on either side of the long one gave 33.4 and
    43.3 turns/s).
    """
    pids: list[int] = []
    long_rngs = [random.Random(index) for index in range(chats)]
    stretches: list[Stretch] = []
    beside: list[tuple[int, Stretch]] = []  # (index of the long stretch before it, the short run)
    with tempfile.TemporaryDirectory() as long_folder, tempfile.TemporaryDirectory() as short_folder, \
            open_client(embedder, True, long_folder, pids=pids) as long_post, \
            open_client(embedder, True, short_folder, pids=pids) as short_post:
        for index, start in enumerate(range(1, long_turns + 1, short_turns)):
            turns = range(start, min(long_turns, start + short_turns - 1) + 1)
            stretches.append(timed(long_post, pids[0], chats, turns, "chat", long_rngs))
            if index % every == 0 or turns[-1] == long_turns:
                rngs = [random.Random(1000 * index + chat) for chat in range(chats)]
                beside.append((index, timed(short_post, pids[1], chats, range(1, short_turns + 1), f"r{index}",
                                            rngs)))
                print(f"turns {turns[0]}–{turns[-1]}: {stretches[-1].rate:.1f} turns/s; {chats} × {short_turns} "
                      f"beside it: {beside[-1][1].rate:.1f} turns/s", flush=True)
    rows = [f"| {chats} × {short_turns}, beside turns {stretches[i].timings[0][0]}–{stretches[i].timings[-1][0]} | "
            f"{run.rate:.1f} | {run.cpu_ms:.1f} | {stretches[i].rate:.1f} | {stretches[i].cpu_ms:.1f} | "
            f"{stretches[i].rate / run.rate:.2f} |" for i, run in beside]
    whole_long = sum(len(s.timings) for s in stretches) / sum(s.elapsed for s in stretches)
    whole_short = sum(len(r.timings) for _, r in beside) / sum(r.elapsed for _, r in beside)
    late = stretches[-1].timings
    short = [t for _, r in beside for t in r.timings]
    return "\n".join([
        f"### {chats} concurrent chats over HTTP, `{embedder}`: {long_turns} turns on one server, {chats} × "
        f"{short_turns} on a second server after one in {every} of the long chats' stretches of {short_turns} turns",
        "",
        "| short run | turns/s | server CPU ms a turn | long chats' stretch before it: turns/s | CPU ms a turn | "
        "ratio long / short |", "|---|---|---|---|---|---|", *rows, "",
        f"Whole run: {chats} × {long_turns} at {whole_long:.1f} turns/s, {chats} × {short_turns} at "
        f"{whole_short:.1f} turns/s: **{whole_long / whole_short:.2f}×**. Last stretch of the long chats: assemble "
        f"p50 / p95 {p50_p95([t[1] for t in late])} ms, record_turn {p50_p95([t[2] for t in late])} ms; the short "
        f"chats: assemble {p50_p95([t[1] for t in short])} ms, record_turn "
        f"{p50_p95([t[2] for t in short])} ms."])


def report(table: str, out: Path | None) -> None:
    """Print a run's Markdown table, and append it to `out` when given (a results file)."""
    print(table)
    if out:
        with out.open("a", encoding="utf-8") as handle:
            handle.write(table + "\n\n")


def process_cpu_seconds(pid: int) -> float:
    """Return the CPU seconds (user + system, every thread) a process has used, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--embedder", default="none")
    parser.add_argument("--http", action="store_true", help="over HTTP to `python server.py` (default: in process)")
    parser.add_argument("--concurrent", type=int, default=0, help="this many chats at once over HTTP")
    parser.add_argument("--short", type=int, default=50, help="with --concurrent: the short chats' turns")
    parser.add_argument("--short-every", type=int, default=4,
                        help="with --concurrent: a short run beside every this many stretches of the long chats")
    parser.add_argument("--compare", type=Path, help="another checkout (before a change): the same chat on both")
    parser.add_argument("--compare-turns", type=int, default=800, help="with --compare: the other's last turn")
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args()
    if args.short_every < 1 or args.short < 1:
        parser.error("--short and --short-every must be at least 1")
    if args.compare:
        table = compare(args.compare, args.compare_turns, args.turns, args.embedder, args.every)
    elif args.concurrent:
        table = concurrent(args.concurrent, args.turns, args.short, args.embedder, args.short_every)
    else:
        table = one_long(args.turns, args.embedder, args.every, args.http)
    report(table, args.out)


if __name__ == "__main__":
    main()
