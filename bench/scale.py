"""A deployment that grows (issue 33): many sessions in one store, and what a new chat's first call costs.

Run: .venv/bin/python -m bench.scale --quick            # 100k memories over 200 sessions, one namespace of 10k
     .venv/bin/python -m bench.scale                    # 1M over 1,000 sessions, one namespace of 100k
     .venv/bin/python -m bench.scale --embedder use     # the same with USE vectors
Prints a Markdown report (and writes it with --out).

Everything goes through HTTP to `python server.py` on a Lite file, as an operator would run it:
1. Fill: `--memories` over `--sessions` sessions (one agent each), `--batch` items a memory_write call, then one
   namespace of `--namespace` memories; the write rate of each step of `--step` memories, RSS and disk.
2. Warm server: each kind of first call of a brand-new session (memory_write, record_turn, assemble), the median
   of `--probes` sessions, beside the warm median of the calls that follow in the same session.
3. Restart: a new server process on the same file: ms to /healthz and to /readyz; then the first call of a session
   written before the restart, of the big namespace, and of a new session, each beside its warm median; RSS.
4. Before ready (unless --no-before-ready): another restart, and the big namespace's first memory_retrieve sent as
   soon as /healthz answers, while /readyz still says 503 (one process, no load balancer holding traffic back).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench.namespace import rss_mb
from bench.perf import OverHttp, memory_text, say, serve, wait_healthy

KINDS = ("fact", "fact", "decision", "preference", "constraint")
NODES = ("memory_write", "record_turn", "assemble", "memory_retrieve")


@dataclass(frozen=True)
class Config:
    memories: int = 1_000_000
    sessions: int = 1_000
    namespace: int = 100_000
    batch: int = 500
    step: int = 100_000
    probes: int = 5
    warm_calls: int = 5
    embedder: str = "none"
    before_ready: bool = True
    filled: str = ""  # a folder holding a store this bench filled (memory.db): restarts on a copy, no fill


QUICK = Config(memories=100_000, sessions=200, namespace=10_000, step=20_000)


@dataclass
class Report:
    config: Config
    rates: list[tuple[int, float]] = field(default_factory=list)  # (memories stored after the step, items/s)
    # Server CPU seconds (user + system) per 1,000 items written over each step: the work a write costs, which the
    # load of a shared machine moves far less than it moves the wall-clock rate.
    cpu_per_k: list[float] = field(default_factory=list)
    namespace_rate: float = 0.0
    rss_mb: dict[str, float] = field(default_factory=dict)
    disk_mb: float = 0.0
    healthy_ms: float = 0.0
    ready_ms: float = 0.0
    firsts: list[tuple[str, str, float, float]] = field(default_factory=list)  # (when, node, first ms, warm ms)
    # The big namespace's first memory_retrieve sent as soon as /healthz answered: (ms, /readyz status before it).
    before_ready: tuple[float, int] | None = None


def items(rng: random.Random, count: int) -> list[dict[str, Any]]:
    return [{"kind": KINDS[i % len(KINDS)], "content": memory_text(rng)[0]} for i in range(count)]


def body(node: str, namespace: dict[str, str], rng: random.Random) -> dict[str, Any]:
    """Return one realistic call of a node in a namespace."""
    content, question = memory_text(rng)
    if node == "memory_write":
        return {**namespace, "items": items(rng, 5)}
    if node == "record_turn":
        return {**namespace, "messages": [{"role": "user", "content": question},
                                          {"role": "assistant", "content": content}]}
    if node == "memory_retrieve":
        return {**namespace, "query": question, "top_k": 10}
    return {**namespace, "user_input": question, "mode": "focused", "max_tokens": 2000}


def timed(client: OverHttp, node: str, payload: dict[str, Any]) -> float:
    started = time.perf_counter()
    client.post(node, payload)
    return (time.perf_counter() - started) * 1000


def first_and_warm(client: OverHttp, node: str, namespaces: list[dict[str, str]], warm_calls: int,
                   rng: random.Random) -> tuple[float, float]:
    """Return (median of each namespace's first call, median of the calls after it) of one node."""
    firsts, warm = [], []
    for namespace in namespaces:
        firsts.append(timed(client, node, body(node, namespace, rng)))
        warm += [timed(client, node, body(node, namespace, rng)) for _ in range(warm_calls)]
    return statistics.median(firsts), statistics.median(warm)


def cpu_seconds(pid: int) -> float:
    """Return the CPU time (user + system) a process has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 1e6


def session(index: int) -> dict[str, str]:
    return {"agent_id": f"user-{index}", "session_id": f"chat-{index}"}


BIG = {"agent_id": "big-agent", "session_id": "big-chat"}


def fill(client: OverHttp, config: Config, report: Report, rng: random.Random, pid: int) -> None:
    per = max(1, config.memories // config.sessions)
    written, step_start, step_written = 0, time.perf_counter(), 0
    step_cpu = cpu_seconds(pid)
    for index in range(config.sessions):
        left = per
        while left:
            count = min(config.batch, left)
            client.post("memory_write", {**session(index), "items": items(rng, count)})
            left -= count
            written += count
            step_written += count
            if step_written >= config.step:
                rate = step_written / (time.perf_counter() - step_start)
                cpu = cpu_seconds(pid)
                report.rates.append((written, rate))
                report.cpu_per_k.append((cpu - step_cpu) * 1000 / step_written)
                say(f"{written:,} stored: {rate:,.0f} items/s, server CPU {report.cpu_per_k[-1]:.2f} s per 1,000 "
                    f"items over the last {step_written:,}")
                step_start, step_written, step_cpu = time.perf_counter(), 0, cpu
    if step_written:
        report.rates.append((written, step_written / (time.perf_counter() - step_start)))
        report.cpu_per_k.append((cpu_seconds(pid) - step_cpu) * 1000 / step_written)
    started, left = time.perf_counter(), config.namespace
    while left:
        count = min(config.batch, left)
        client.post("memory_write", {**BIG, "items": items(rng, count)})
        left -= count
    report.namespace_rate = config.namespace / max(time.perf_counter() - started, 1e-9)
    say(f"one namespace of {config.namespace:,}: {report.namespace_rate:,.0f} items/s")


def wait_drained(base: str, timeout: float = 600) -> bool:
    """Wait until the server's embedding backlog is empty (its /metrics gauge), then a moment for the worker's
    last batch to be let go; return False when it did not drain in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gauge = [line for line in requests.get(f"{base}/metrics", timeout=10).text.splitlines()
                 if line.startswith("acn_embedding_backlog ")]
        if not gauge or float(gauge[0].split()[1]) == 0:
            time.sleep(2)
            return True
        time.sleep(0.5)
    return False


def wait_ready(base: str, process: subprocess.Popen[bytes], timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before /readyz")
        if requests.get(f"{base}/readyz", timeout=10).status_code in (200, 404):  # 404: a release without it
            return
        time.sleep(0.05)
    raise RuntimeError("/readyz did not answer 200")


def run(config: Config, folder: Path) -> Report:
    report, rng = Report(config), random.Random(33)
    store = folder / "memory.db"
    if config.filled:  # a store filled before (the same shape): only the restarts are measured, on a copy
        shutil.copytree(Path(config.filled) / "memory.db", store)
        return restarted(config, report, store, rng)
    with serve(store, config.embedder) as (base, process, _):
        wait_healthy(base, process)
        with closing(OverHttp(base)) as client:
            fill(client, config, report, rng, process.pid)
            report.rss_mb["after the fill"] = rss_mb(process.pid)
            # With an embedder the worker may still be filling vectors: RSS at rest is read once it is done too.
            if config.embedder != "none" and wait_drained(base):
                report.rss_mb["after the fill, backlog drained"] = rss_mb(process.pid)
            for node in NODES:
                fresh = [{"agent_id": f"new-{node}-{i}", "session_id": "first-chat"} for i in range(config.probes)]
                first, warm = first_and_warm(client, node, fresh, config.warm_calls, rng)
                report.firsts.append(("warm server", f"new session: {node}", first, warm))
                say(f"new session, {node}: first {first:.0f} ms, warm {warm:.0f} ms")
    return restarted(config, report, store, rng)


def restarted(config: Config, report: Report, store: Path, rng: random.Random) -> Report:
    """Measure the restarts of a filled store (steps 3 and 4)."""
    report.disk_mb = disk_mb(store)
    with serve(store, config.embedder) as (base, process, started):
        wait_healthy(base, process)
        report.healthy_ms = (time.perf_counter() - started) * 1000
        wait_ready(base, process)
        report.ready_ms = (time.perf_counter() - started) * 1000
        say(f"restart: healthy in {report.healthy_ms:,.0f} ms, ready in {report.ready_ms:,.0f} ms")
        report.rss_mb["after a restart, ready"] = rss_mb(process.pid)
        with closing(OverHttp(base)) as client:
            for node in NODES:
                old = [session(config.sessions - 1 - i - NODES.index(node) * config.probes)
                       for i in range(config.probes)]
                cases = [("existing session", old)] if config.memories else []  # (a store of the namespace alone)
                cases.append(("new session", [{"agent_id": f"later-{node}-{i}", "session_id": "chat"}
                                              for i in range(config.probes)]))
                if config.namespace:
                    cases.append((f"namespace of {config.namespace:,}", [BIG]))
                for label, namespaces in cases:
                    first, warm = first_and_warm(client, node, namespaces, config.warm_calls, rng)
                    report.firsts.append(("after a restart", f"{label}: {node}", first, warm))
                    say(f"after a restart, {label}, {node}: first {first:.0f} ms, warm {warm:.0f} ms")
            report.rss_mb["after a restart and the probes"] = rss_mb(process.pid)
    if config.before_ready and config.namespace:
        with serve(store, config.embedder) as (base, process, _), closing(OverHttp(base)) as client:
            wait_healthy(base, process)
            status = requests.get(f"{base}/readyz", timeout=10).status_code
            report.before_ready = (timed(client, "memory_retrieve", body("memory_retrieve", BIG, rng)), status)
            say(f"before ready (/readyz {status}): the namespace's first memory_retrieve "
                f"{report.before_ready[0]:.0f} ms")
            wait_ready(base, process)
    return report


def markdown(report: Report, command: str) -> str:
    config = report.config
    lines = [f"`{command}`: {config.memories:,} memories over {config.sessions:,} sessions and one namespace of "
             f"{config.namespace:,}; {config.batch} items a memory_write call; embedder `{config.embedder}`; HTTP to "
             "`python server.py` on a Milvus Lite file.", "",
             "| stored | write rate (items/s) over the step | server CPU s per 1,000 items |", "|---|---|---|"]
    lines += [f"| {stored:,} | {rate:,.0f} | {cpu:.2f} |"
              for (stored, rate), cpu in zip(report.rates, report.cpu_per_k, strict=True)]
    lines += ["", f"One namespace of {config.namespace:,}: {report.namespace_rate:,.0f} items/s. "
              f"Disk {report.disk_mb:,.0f} MB. Restart: /healthz in {report.healthy_ms:,.0f} ms, /readyz in "
              f"{report.ready_ms:,.0f} ms.", "", "| RSS | MB |", "|---|---|"]
    lines += [f"| {label} | {mb:,.0f} |" for label, mb in report.rss_mb.items()]
    lines += ["", f"Each first call: the median over {config.probes} sessions (1 for the big namespace), beside the "
              f"median of the {config.warm_calls} calls after it in the same session.", "",
              "| when | call | first (ms) | warm median (ms) | first / warm |", "|---|---|---|---|---|"]
    lines += [f"| {when} | {call} | {first:,.0f} | {warm:,.1f} | {first / max(warm, 1e-9):.1f}× |"
              for when, call, first, warm in report.firsts]
    if report.before_ready is not None:
        lines += ["", f"Before ready (another restart; /readyz answered {report.before_ready[1]} just before): the "
                  f"namespace's first memory_retrieve as soon as /healthz answered: {report.before_ready[0]:,.0f} ms."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100k memories over 200 sessions, a namespace of 10k")
    parser.add_argument("--memories", type=int)
    parser.add_argument("--sessions", type=int)
    parser.add_argument("--namespace", type=int, help="memories of the one big namespace (0: none)")
    parser.add_argument("--step", type=int, help="memories between two write-rate figures")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--probes", type=int)
    parser.add_argument("--embedder", choices=["none", "use"], default="none")
    parser.add_argument("--no-before-ready", dest="before_ready", action="store_false",
                        help="skip the restart whose first call is sent before /readyz says ready")
    parser.add_argument("--filled", help="a folder with a store filled before (memory.db): measure its restarts only")
    parser.add_argument("--dir", type=Path,
                        help="where the store goes, kept for --filled (default: a temporary folder, removed)")
    parser.add_argument("--out", type=Path, help="write the Markdown report here too")
    args = parser.parse_args()
    base = QUICK if args.quick else Config()
    config = Config(**{**base.__dict__, **{key: value for key, value in vars(args).items()
                                           if key in Config.__dataclass_fields__ and value is not None}})
    command = "python -m bench.scale " + " ".join(sys.argv[1:])
    if args.dir:  # kept afterwards: `--filled DIR` measures its restarts again without a new fill
        if (args.dir / "memory.db").exists():
            parser.error(f"{args.dir} holds a store already: name an empty folder, or re-measure it with --filled")
        args.dir.mkdir(parents=True, exist_ok=True)  # a folder named on the command line need not exist yet
        text = markdown(run(config, args.dir), command.strip())
    else:
        with tempfile.TemporaryDirectory() as folder:
            text = markdown(run(config, Path(folder)), command.strip())
    print(text)
    if args.out:
        args.out.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
