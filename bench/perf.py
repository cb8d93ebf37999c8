"""Node latency, write throughput, store-size and history-length scaling, baselines and cold start (issue 8).

Run: .venv/bin/python -m bench.perf           # stores of 1k and 10k memories, sessions up to 1,000 turns
     .venv/bin/python -m bench.perf --large   # adds a 100k-memory store (a longer run)
     .venv/bin/python -m bench.perf --quick   # smoke variant, about a minute
Prints a Markdown report and writes bench/results/perf.md (--large: perf-large.md; --quick: only with --out).

Every call is sequential from one client, so throughput is 1 / mean latency, not a concurrency figure (that is
bench.load). Each store size is measured in process (Flask test client) and then over HTTP (a real
`python server.py` on loopback, opened on the same Lite file); what a measurement writes is deleted afterwards,
so the store stays at its size. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any, Protocol

import requests
from flask import Flask
from milvus_lite.server_manager import server_manager_instance  # type: ignore[import-untyped]

from acn.app.runtime import Runtime
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory
from acn.common.settings import Settings
from acn.memory.items import DEFAULT_IMPORTANCE
from acn.server import create_app
from acn.storage.database.memory_rows import new_memory_id
from acn.text.tokens import MESSAGE_OVERHEAD_TOKENS, Tokenizer, load_tokenizer
from bench.progress import progress
from tests.conftest import ROOT, free_port, server_env
from tests.long_conversation import QUESTIONS, turn_messages

RESULTS = Path(__file__).resolve().parent / "results"
SYSTEM = "你是XX电商平台的客服助手，语气亲切，不得承诺超出政策范围的内容。"
TARGET = {"agent_id": "bench-target", "session_id": "bench-target-main"}
TARGET_MEMORIES = 60
SEED_BATCH = 500
# Seeded rows: 20 per session, 10 sessions per agent; four in ten are archived turns, as in a real store.
PER_SESSION, PER_AGENT = 20, 200
SEED_KINDS = ("turn", "turn", "turn", "turn", "fact", "fact", "decision", "preference", "constraint", "identity")
COMPACT_TURNS, EDIT_TURNS, PROBE_TURNS = 20, 50, 20
MEM0 = [("mem0 `add` (writes through an LLM)", "4–20 s per write", "users' reports, quoted in issue 8"),
        ("mem0 `search`", "~150 ms p50", "mem0's published figure, quoted in issue 8")]


@dataclass(frozen=True)
class Config:
    """What one run measures and how many calls each figure rests on."""

    sizes: tuple[int, ...] = (1_000, 10_000)
    retrieve_calls: int = 100
    edit_calls: int = 50
    write_calls: int = 100
    batch_calls: int = 10
    batch_size: int = 100
    record_turns: int = 50
    assemble_calls: int = 50
    compact_calls: int = 20
    scaling_turns: tuple[int, ...] = (10, 50, 100, 1_000)
    scaling_probes: int = 40
    cold_starts: int = 3
    command: str = "python -m bench.perf"


QUICK = Config(sizes=(1_000,), retrieve_calls=30, edit_calls=15, write_calls=20, batch_calls=3, record_turns=20,
               assemble_calls=15, compact_calls=5, scaling_turns=(10, 50, 100), scaling_probes=5, cold_starts=1,
               command="python -m bench.perf --quick")
LARGE = Config(sizes=(1_000, 10_000, 100_000), command="python -m bench.perf --large")


@dataclass(frozen=True)
class Target:
    """One of issue 8's targets: a limit on a row's p50, p95, throughput or value."""

    text: str
    metric: str  # "p50" | "p95" | "throughput" | "value"
    limit: float
    at_least: bool = False

    def met(self, row: Row) -> bool:
        measured = getattr(row, self.metric)
        return bool(measured >= self.limit if self.at_least else measured <= self.limit)


RECORD_TURN = Target("p95 ≤ 30 ms", "p95", 30)
WRITE_BATCHED = Target("≥ 1,000 items/s", "throughput", 1_000, at_least=True)
RETRIEVE = {10_000: Target("p50 ≤ 20 ms at 10k", "p50", 20), 100_000: Target("p50 ≤ 80 ms at 100k", "p50", 80)}
ASSEMBLE_50 = Target("p50 ≤ 5 ms (50-turn session)", "p50", 5)
RATIO = Target("ratio ≤ 1.5", "value", 1.5)
COLD_START = Target("≤ 3 s", "p50", 3_000)
# The order, for the targets table.
TARGET_ORDER = [RECORD_TURN, WRITE_BATCHED, *RETRIEVE.values(), ASSEMBLE_50, RATIO, COLD_START]


@dataclass
class Row:
    """One measured figure: latency samples in ms, or a single value (a ratio, an overhead)."""

    section: str  # "nodes" | "store" | "scaling" | "cold start"
    name: str
    via: str
    scale: str  # the store size, or the session length in the scaling section
    times: list[float] = field(default_factory=list)
    detail: str = ""
    items: int = 1  # items per call: throughput is items/s when > 1; 0: no throughput (a one-off event)
    value: float | None = None
    unit: str = ""
    target: Target | None = None
    server: list[float] = field(default_factory=list)  # over HTTP: the server's own times (Server-Timing)

    @property
    def p50(self) -> float:
        return percentile(self.times, 0.50) if self.times else float(self.value or 0)

    @property
    def p95(self) -> float:
        return percentile(self.times, 0.95) if self.times else float(self.value or 0)

    @property
    def throughput(self) -> float:
        return self.items * len(self.times) * 1000 / sum(self.times) if self.times and self.items else 0.0

    @property
    def status(self) -> str:
        if self.target is None:
            return ""
        return "met" if self.target.met(self) else "**not met**"


def percentile(values: list[float], share: float) -> float:
    """Return the nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def label(size: int) -> str:
    """Return 1k for 1000, 100k for 100000, the number itself below 1000."""
    return f"{size // 1000}k" if size >= 1000 and size % 1000 == 0 else str(size)


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- data ----------------------------------------------------------------------------------

VOCAB: dict[str, list[str]] = {
    "status": ["派送中", "已签收", "待揽收", "运输中", "已退回"],
    "system": ["对账", "支付", "退款", "物流", "会员", "库存", "发票", "风控"],
    "name": ["张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊", "赵敏", "黄强"],
    "item": ["蓝色款", "大号", "顺丰快递", "电子发票", "周末配送", "无糖饮品"],
    "company": ["Acme", "Globex", "Initech", "Umbrella", "Hooli", "Vandelay"],
    "service": ["billing", "checkout", "search", "ledger", "notifier", "gateway"],
    "region": ["eu-west", "us-east", "ap-south", "cn-north"],
    "person": ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank"],
    "channel": ["email", "phone", "chat", "SMS"],
}
TEMPLATES = [
    ("订单{order}的物流状态是{status}，预计{m}月{d}日送达", "订单{order}现在到哪了？"),
    ("{system}接口的超时设为{n}秒", "{system}接口的超时是多少？"),
    ("{m}月{d}日前把{amount}万转到对公账户{account}", "{amount}万要转到哪个对公账户？"),
    ("用户{name}偏好{item}，不要推荐新品", "{name}喜欢什么？"),
    ("The invoice {invoice} for {company} totals {amount} USD, due {m}/{d}", "how much is invoice {invoice}?"),
    ("Deploy {service} version 2.{n}.{d} to the {region} cluster", "which {service} version goes to {region}?"),
    ("Customer {person} prefers {channel} between {d}:00 and {m}:00 at {company}", "how should {person} be contacted?"),
]


def memory_text(rng: random.Random) -> tuple[str, str]:
    """Return a synthetic memory (zh or en, with numbers and ids) and a question it answers."""
    values = {key: rng.choice(words) for key, words in VOCAB.items()}
    values.update(order=f"ORD-{rng.randint(10**7, 10**8 - 1)}", invoice=f"INV-{rng.randint(10**5, 10**6 - 1)}",
                  account=str(rng.randint(10**7, 10**8 - 1)), amount=str(rng.randint(2, 500)),
                  n=str(rng.randint(5, 90)), m=str(rng.randint(1, 12)), d=str(rng.randint(1, 28)))
    content, question = rng.choice(TEMPLATES)
    return content.format(**values), question.format(**values)


def seed_memory(namespace: dict[str, str], kind: str, content: str, rng: random.Random, now: int) -> Memory:
    """Return a stored-shape memory written some time in the last 30 days."""
    stamp = now - rng.randint(0, 30 * 86_400_000)
    turn = rng.randint(1, 200)
    return Memory(id=new_memory_id(), kind=kind, content=content, importance=DEFAULT_IMPORTANCE[kind],  # type: ignore[arg-type]
                  scope="agent" if rng.random() < 0.1 else "session", agent_id=namespace["agent_id"],
                  session_id=namespace["session_id"], created_at=stamp, updated_at=stamp, version=1,
                  turn_range=[turn, turn])


def target_items() -> list[tuple[str, str, str]]:
    """Return the retrieval namespace's (kind, content, question) triples; the same in every run."""
    rng = random.Random(8)
    return [(SEED_KINDS[4 + i % 6], *memory_text(rng)) for i in range(TARGET_MEMORIES)]


def seed(runtime: Runtime, start: int, stop: int) -> None:
    """Write memories start..stop-1 straight through the repository, in batches; the first ones are the target's."""
    rng, now = random.Random(start), int(time.time() * 1000)
    targets = target_items()
    batch: list[Memory] = []
    for index in progress(range(start, stop), total=stop - start, desc=f"seed {label(stop)}"):
        if index < len(targets):
            kind, content, _ = targets[index]
            memory = seed_memory(TARGET, kind, content, rng, now)
        else:
            namespace = {"agent_id": f"seed-a{index // PER_AGENT}", "session_id": f"seed-s{index // PER_SESSION}"}
            memory = seed_memory(namespace, SEED_KINDS[index % len(SEED_KINDS)], memory_text(rng)[0], rng, now)
        batch.append(memory)
        if len(batch) == SEED_BATCH or index == stop - 1:
            runtime.memories.save(DEFAULT_TENANT, batch)
            batch = []
    runtime.store.flush()


def conversation_turn(turn: int) -> list[dict[str, Any]]:
    """Return turn n of an endless conversation: the 60-turn customer-service scenario, repeated."""
    return turn_messages((turn - 1) % 60 + 1)


def unrepeated_turn(turn: int) -> list[dict[str, Any]]:
    """Return turn n of the same conversation with every text made unique (its round of the scenario appended):
    a long session in which no line repeats, so that retrieval's candidate pool fills with distinct texts."""
    rounds = (turn - 1) // 60 + 1
    return [{**m, "content": f"{m['content']} (#{rounds})"} if m.get("content") else m for m in conversation_turn(turn)]


def flat(turns: int, first: int = 1) -> list[dict[str, Any]]:
    return [message for turn in range(first, first + turns) for message in conversation_turn(turn)]


def ask(namespace: dict[str, str], index: int) -> dict[str, Any]:
    """Return an assemble request as a chat loop sends it before each model call."""
    question = list(QUESTIONS.values())[index % len(QUESTIONS)]
    return {**namespace, "system_prompt": SYSTEM, "user_input": question, "max_tokens": 4000}


# -- transports ----------------------------------------------------------------------------


class Transport(Protocol):
    via: str

    def post(self, node: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def delete_agent(self, agent_id: str) -> None: ...


def checked(node: str, status: int, body: Any) -> dict[str, Any]:
    if status != 200 or not isinstance(body, dict):
        raise RuntimeError(f"{node} answered {status}: {str(body)[:300]}")
    return body


class InProcess:
    """Calls through Flask's test client: the node, parsing and serialisation, no sockets."""

    via = "in-process"

    def __init__(self, app: Flask) -> None:
        self._client = app.test_client()

    def post(self, node: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._client.post(f"/v1/nodes/{node}", json=body)
        return checked(node, response.status_code, response.get_json())

    def delete_agent(self, agent_id: str) -> None:
        self._client.delete("/v1/memories", query_string={"agent_id": agent_id})


class OverHttp:
    """Calls a server process on loopback over one keep-alive connection."""

    via = "HTTP"

    def __init__(self, base: str) -> None:
        self._base = base
        self._session = requests.Session()
        self.server_ms: list[float] = []  # each call's Server-Timing, so that a row can say what the wire added

    def close(self) -> None:
        self._session.close()

    def post(self, node: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._session.post(f"{self._base}/v1/nodes/{node}", json=body, timeout=300)
        self.server_ms.append(float(response.headers.get("Server-Timing", "app;dur=nan").split("dur=")[-1]))
        return checked(node, response.status_code, response.json())

    def delete_agent(self, agent_id: str) -> None:
        self._session.delete(f"{self._base}/v1/memories", params={"agent_id": agent_id}, timeout=300)


def server_times(transport: Transport) -> list[float]:
    """Return and forget the server's own times of the HTTP calls made since the last take ([] in process)."""
    kept: list[float] = getattr(transport, "server_ms", [])
    taken = list(kept)
    kept.clear()
    return taken


def time_posts(transport: Transport, node: str, bodies: list[dict[str, Any]], desc: str,
               warmup: int = 0) -> tuple[list[float], list[dict[str, Any]]]:
    """Post each body in turn (the first `warmup` untimed) and return the latencies in ms and the responses."""
    for body in bodies[:warmup]:
        transport.post(node, body)
    server_times(transport)  # the untimed calls' server times are not the row's
    times, responses = [], []
    for body in progress(bodies[warmup:], total=len(bodies) - warmup, desc=desc):
        started = time.perf_counter()
        responses.append(transport.post(node, body))
        times.append((time.perf_counter() - started) * 1000)
    return times, responses


@contextmanager
def opened_app(store: Path) -> Iterator[Flask]:
    """Yield an app on the Lite file; afterwards close it and give the file up for a server process."""
    app = create_app(Settings(milvus_uri=str(store), log_level="WARNING", cache_dir=str(store.parent / "model-cache")))
    try:
        yield app
    finally:
        app.extensions["acn"].close()
        # Closing the client leaves Milvus Lite's in-process server (and its file lock) running until exit.
        server_manager_instance.release_server(str(store))


@contextmanager
def launched(store: Path, embedder: str = "none", cache: Path | None = None) -> Iterator[tuple[str, float, float]]:
    """Start `python server.py` on the store; yield its URL, ms to the first /healthz and to the first retrieval.

    cache: the model cache folder (ACN_CACHE_DIR); by default one beside the store.
    """
    with serve(store, embedder, cache) as (base, process, started):
        wait_healthy(base, process)
        healthy = (time.perf_counter() - started) * 1000
        # The first node request pays for what start-up leaves lazy (jieba's dictionary) and, with an
        # embedder, for embedding its query.
        with closing(OverHttp(base)) as first:
            first.post("memory_retrieve", {**TARGET, "query": "订单现在到哪了？"})
        yield base, healthy, (time.perf_counter() - started) * 1000


@contextmanager
def serve(store: Path, embedder: str = "none", cache: Path | None = None
          ) -> Iterator[tuple[str, subprocess.Popen[bytes], float]]:
    """Start `python server.py` on the store; yield its URL, the process and its perf_counter start time.

    The caller waits for /healthz (wait_healthy); the process is terminated on exit.
    """
    port = free_port()
    env = server_env(ACN_MILVUS_URI=str(store), ACN_LOG_LEVEL="WARNING", ACN_EMBEDDER=embedder,
                     ACN_CACHE_DIR=str(cache or store.parent / "model-cache"))
    started = time.perf_counter()
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}", process, started
    finally:
        process.terminate()
        process.wait(timeout=300)


def wait_healthy(base: str, process: subprocess.Popen[bytes], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode} before answering /healthz")
        try:
            if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                return
        except requests.ConnectionError:
            pass  # not listening yet: poll again after the sleep
        time.sleep(0.02)
    raise TimeoutError(f"/healthz did not answer within {timeout}s")


# -- measurements --------------------------------------------------------------------------


def node_rows(transport: Transport, size: int, config: Config, runtime: Runtime | None = None) -> list[Row]:
    """Measure every node once at one store size; delete what the measurements wrote.

    With the in-process runtime, memory_retrieve alternates with a bare BM25 query on the store (the floor).
    """
    via, store = transport.via, label(size)
    agent = f"bench-w-{via}-{store}"
    say(f"{store} store, {via}: nodes")
    rows = retrieval_rows(transport, size, config, runtime)

    session = {"agent_id": agent, "session_id": "turns"}
    bodies: list[dict[str, Any]] = [{**session, "messages": conversation_turn(t)}
                                    for t in range(1, config.record_turns + 1)]
    times, _ = time_posts(transport, "record_turn", bodies, f"{store} {via} record_turn")
    rows.append(Row("nodes", "record_turn", via, store, times, f"turns 1–{config.record_turns}", target=RECORD_TURN,
                    server=server_times(transport)))
    bodies = [ask(session, i) for i in range(config.assemble_calls + 1)]
    times, _ = time_posts(transport, "assemble", bodies, f"{store} {via} assemble", warmup=1)
    rows.append(Row("nodes", "assemble", via, store, times, f"{config.record_turns}-turn session, auto, 4,000 tokens",
                    target=ASSEMBLE_50 if config.record_turns == 50 else None, server=server_times(transport)))

    # A different stretch of the conversation each call: nothing computed for one call's text serves the next.
    bodies = [{"agent_id": agent, "session_id": f"compact-{i}", "messages": flat(COMPACT_TURNS, 1 + 7 * i % 60),
               "force": True, "engine": "extractive"} for i in range(config.compact_calls + 1)]
    times, _ = time_posts(transport, "compact", bodies, f"{store} {via} compact", warmup=1)
    rows.append(Row("nodes", "compact", via, store, times, f"{COMPACT_TURNS} given turns, extractive, force",
                    server=server_times(transport)))
    bodies = [{"messages": flat(EDIT_TURNS)}] * (config.edit_calls + 1)
    times, _ = time_posts(transport, "edit_context", bodies, f"{store} {via} edit_context", warmup=1)
    rows.append(Row("nodes", "edit_context", via, store, times, f"{EDIT_TURNS} turns, default rules",
                    server=server_times(transport)))
    rows += write_rows(transport, agent, size, config)
    transport.delete_agent(agent)
    return rows


def write_rows(transport: Transport, agent: str, size: int, config: Config) -> list[Row]:
    """Measure memory_write with one item per call and with batches."""
    via, store = transport.via, label(size)
    rng = random.Random(size)

    def items(count: int) -> list[dict[str, Any]]:
        return [{"kind": SEED_KINDS[4 + i % 6], "content": memory_text(rng)[0]} for i in range(count)]

    bodies = [{"agent_id": agent, "session_id": "single", "items": items(1)} for _ in range(config.write_calls + 1)]
    times, _ = time_posts(transport, "memory_write", bodies, f"{store} {via} memory_write ×1", warmup=1)
    rows = [Row("nodes", "memory_write ×1", via, store, times, "one item per call", server=server_times(transport))]
    bodies = [{"agent_id": agent, "session_id": "batched", "items": items(config.batch_size)}
              for _ in range(config.batch_calls)]
    times, _ = time_posts(transport, "memory_write", bodies, f"{store} {via} memory_write ×{config.batch_size}")
    rows.append(Row("nodes", f"memory_write ×{config.batch_size}", via, store, times,
                    f"{config.batch_size} items per call", items=config.batch_size, target=WRITE_BATCHED,
                    server=server_times(transport)))
    return rows


def retrieval_rows(transport: Transport, size: int, config: Config, runtime: Runtime | None) -> list[Row]:
    """Time memory_retrieve on the target namespace, each call followed by the same bare BM25 query if asked."""
    via, store = transport.via, label(size)
    server_times(transport)  # only this row's calls
    floor = bare_bm25(runtime) if runtime is not None else None
    questions = [question for _, _, question in target_items()]
    ours: list[float] = []
    bare: list[float] = []
    for i in progress(range(config.retrieve_calls + 2), total=config.retrieve_calls + 2, desc=f"{store} {via} "
                      "memory_retrieve"):
        question = questions[i % len(questions)]
        started = time.perf_counter()
        transport.post("memory_retrieve", {**TARGET, "query": question, "top_k": 3})
        ours.append((time.perf_counter() - started) * 1000)
        if floor is not None:
            started = time.perf_counter()
            floor(question)
            bare.append((time.perf_counter() - started) * 1000)
    rows = [Row("nodes", "memory_retrieve", via, store, ours[2:], "one namespace, top_k 3", target=RETRIEVE.get(size),
                server=server_times(transport)[2:])]
    if floor is not None:
        rows.append(Row("store", "bare pymilvus BM25", "pymilvus", store, bare[2:],
                        "same collection and namespace, limit 3, alternating with memory_retrieve"))
        rows.append(Row("store", "memory_retrieve above the store's search", "in-process", store,
                        value=rows[0].p50 - rows[1].p50, unit="ms",
                        detail="memory_retrieve p50 − bare BM25 p50; negative when a Lite session is searched in "
                               "process (acn/storage/database/lite/local_index.py) instead of by the store"))
    return rows


def bare_bm25(runtime: Runtime) -> Callable[[str], object]:
    """Return a BM25 search on the memories collection through the store's own client, namespace-filtered."""
    client = runtime.store._client  # the store's own MilvusClient (a second client cannot open a Lite file)
    assert client is not None
    name = runtime.memories.spec.name
    where = (f'tenant == "{DEFAULT_TENANT}" and agent_id == "{TARGET["agent_id"]}" '
             f'and session_id == "{TARGET["session_id"]}"')

    def search(query: str) -> object:
        return client.search(name, data=[query], anns_field="sparse", limit=3, filter=where,
                             output_fields=["id", "content"], search_params={"metric_type": "BM25"})

    return search


def scaling_rows(app: Flask, config: Config) -> list[Row]:
    """Measure assemble, record_turn and the full-history baseline as sessions grow.

    Sessions of every length are built first; the timed calls then go round-robin over the lengths, so a
    change in background load hits every length alike and the ratios stay comparable.
    """
    transport, tokenizer = InProcess(app), load_tokenizer(app.extensions["acn"].settings.tokenizer)
    lengths = config.scaling_turns
    # Timed record_turns must not lengthen a session much: short sessions get one probe each, so more sessions.
    per_session = {n: min(config.scaling_probes, max(1, n // 10)) for n in lengths}
    sessions = {n: [{"agent_id": "bench-scale", "session_id": f"t{n}-{i}"}
                    for i in range(math.ceil(config.scaling_probes / per_session[n]))] for n in lengths}
    builds = [(s, t) for n in lengths for s in sessions[n] for t in range(1, n + 1)]
    say(f"scaling: recording {len(builds):,} turns into sessions of {', '.join(f'{n:,}' for n in lengths)} turns")
    low, high = min(lengths), max(lengths)
    # The repeated scenario repeats its lines; a session of the longest length whose lines never repeat shows
    # the cost when the candidate pool fills with distinct texts (key -high below).
    unique = {"agent_id": "bench-scale", "session_id": f"u{high}"}
    builds += [(unique, -t) for t in range(1, high + 1)]
    for session, turn in progress(builds, total=len(builds), desc="build sessions"):
        messages = conversation_turn(turn) if turn > 0 else unrepeated_turn(-turn)
        transport.post("record_turn", {**session, "messages": messages})
    # Assemble does not lengthen a session: every length is asked in one session, so each figure is a warm
    # session's (the first, untimed call of each pays for loading what the process keeps of the session).
    asked = {n: [ask(sessions[n][0], i) for i in range(config.assemble_calls + 1)] for n in lengths}
    asked[-high] = [ask(unique, i) for i in range(config.assemble_calls + 1)]
    times, answers = round_robin(transport, "assemble", asked)
    rows = [Row("scaling", "assemble", "in-process", f"{n:,} turns", times[n][1:],
                f"→ {answers[n]['tokens']['total']:,} tokens", target=ASSEMBLE_50 if n == 50 else None)
            for n in lengths]
    rows.append(Row("scaling", "assemble, no line repeated", "in-process", f"{high:,} turns", times[-high][1:],
                    f"→ {answers[-high]['tokens']['total']:,} tokens"))
    rows += [Row("scaling", "assemble, first call in the session", "in-process", f"{n:,} turns", times[n][:1],
                 "reads what the process does not keep yet (superseded values, archive)") for n in lengths]
    probes = {n: [{**sessions[n][k // per_session[n]], "messages": turn_messages(k % PROBE_TURNS + 1)}
                  for k in range(config.scaling_probes)] for n in lengths}
    times, _ = round_robin(transport, "record_turn", probes)
    rows += [Row("scaling", "record_turn", "in-process", f"{n:,} turns", times[n], f"turn {n + 1:,}") for n in lengths]
    rows += [full_history_row(tokenizer, n, config.assemble_calls) for n in lengths]
    transport.delete_agent("bench-scale")
    for name in ("assemble", "record_turn", "full history + tiktoken"):
        by_turns = {r.scale: r.p50 for r in rows if r.name == name}
        rows.append(Row("scaling", f"{name} t({high:,})/t({low})", "in-process", f"{low}→{high:,} turns",
                        value=by_turns[f"{high:,} turns"] / by_turns[f"{low:,} turns"], unit="×", detail="ratio of p50",
                        target=RATIO if name != "full history + tiktoken" else None))
    unrepeated = next(r.p50 for r in rows if r.name == "assemble, no line repeated")
    shortest = next(r.p50 for r in rows if r.name == "assemble" and r.scale == f"{low:,} turns")
    rows.append(Row("scaling", f"assemble, no line repeated t({high:,})/t({low})", "in-process",
                    f"{low}→{high:,} turns", value=unrepeated / shortest, unit="×",
                    detail="ratio of p50; the pool fills with distinct candidates"))
    return rows


def round_robin(transport: Transport, node: str, bodies: dict[int, list[dict[str, Any]]]
                ) -> tuple[dict[int, list[float]], dict[int, dict[str, Any]]]:
    """Post the i-th body of every key before any (i+1)-th one; return the latencies and last answer per key."""
    times: dict[int, list[float]] = {key: [] for key in bodies}
    last: dict[int, dict[str, Any]] = {}
    rounds = max(len(b) for b in bodies.values())
    for i in progress(range(rounds), total=rounds, desc=f"{node} round-robin"):
        for key, items in bodies.items():
            if i < len(items):
                started = time.perf_counter()
                last[key] = transport.post(node, items[i])
                times[key].append((time.perf_counter() - started) * 1000)
    return times, last


def full_history_row(tokenizer: Tokenizer, turns: int, calls: int) -> Row:
    """Time the baseline: the whole history as the prompt, counted with tiktoken.

    Counted with the bare encoding, as a caller would (our Tokenizer remembers counts of texts it saw).
    """
    per_turn = [conversation_turn(t) for t in range(1, turns + 1)]
    encoding = tokenizer.encoding
    times, tokens = [], 0
    for _ in range(calls):
        started = time.perf_counter()
        history = [message for turn in per_turn for message in turn]
        tokens = sum(MESSAGE_OVERHEAD_TOKENS + len(encoding.encode(message_text(message), disallowed_special=()))
                     for message in history)
        times.append((time.perf_counter() - started) * 1000)
    return Row("scaling", "full history + tiktoken", "in-process", f"{turns:,} turns", times, f"→ {tokens:,} tokens")


def message_text(message: dict[str, Any]) -> str:
    """Return what a chat message costs tokens for: its content and its tool calls' names and arguments."""
    calls = [f"{c['function'].get('name', '')}{c['function'].get('arguments', '')}"
             for c in message.get("tool_calls") or []]
    return "".join([message.get("content") or "", *calls])


def cold_rows(store: str, launches: list[tuple[float, float]], detail: str,
              first_detail: str = "jieba dictionary loaded") -> list[Row]:
    health, first = [h for h, _ in launches], [f for _, f in launches]
    return [Row("cold start", "launch → first /healthz", "python server.py", store, health, detail, items=0,
                target=COLD_START),
            Row("cold start", "launch → first memory_retrieve", "python server.py", store, first,
                first_detail, items=0, target=COLD_START)]


def empty_cold_starts(folder: Path, count: int, embedder: str = "none") -> list[Row]:
    """Start on fresh stores: with an embedder, start-up also loads its model (and the store has a dense field).

    With an embedder, one more start comes first, on an empty model cache: the first start after installing
    builds the cache, every later one loads it. It is reported apart, with no target.
    """
    launches = []
    launches_count = count + (embedder != "none")
    # Without an embedder, the run's model cache (jieba's dictionary, written by the first store opened); with
    # one, a new cache: the first start builds everything a first start after installing builds.
    cache = folder / "model-cache" if embedder == "none" else folder / f"model-cache-{embedder}"
    for i in range(launches_count):
        say(f"cold start {i + 1}/{launches_count}, empty store, embedder {embedder}")
        store = folder / "empty" / f"{embedder}-{i}" / "memory.db"
        with launched(store, embedder, cache) as (_, healthy, first):
            launches.append((healthy, first))
    if embedder == "none":
        return cold_rows("empty", launches, "collections created")
    building, launches = launches[0], launches[1:]
    rows = [Row("cold start", "launch → first memory_retrieve", "python server.py",
                f"empty, {embedder} embedder, first start", [building[1]],
                "model cache empty: jieba's dictionary and the model are built and cached", items=0)]
    return rows + cold_rows(f"empty, {embedder} embedder", launches, "collections created, embedder loaded",
                            "jieba dictionary loaded, model loaded from its cache, query embedded")


# -- the run -------------------------------------------------------------------------------


@dataclass
class Report:
    config: Config
    rows: list[Row]
    seconds: float = 0.0
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average before and after: others share the cores

    def markdown(self) -> str:
        return render(self)


def run(config: Config, folder: Path) -> Report:
    """Run every measurement of the config on a fresh store under folder and return the report."""
    started, load = time.perf_counter(), os.getloadavg()[0]
    store, seeded, rows = folder / "memory.db", 0, []
    for size in sorted(config.sizes):
        with opened_app(store) as app:
            say(f"{label(size)} store: seeding {size - seeded:,} memories")
            seed(app.extensions["acn"], seeded, size)
            seeded = size
        # Measured on the store reopened: after a bulk load Milvus Lite merges the segments it left in
        # background threads of the writing process (closing waits for them), which would otherwise share the
        # interpreter with the first minute of measurements. The figures are a settled store's.
        with opened_app(store) as app:
            rows += node_rows(InProcess(app), size, config, app.extensions["acn"])
        say(f"{label(size)} store: starting python server.py")
        with launched(store) as (base, healthy, first):
            launches = [(healthy, first)]
            rows += node_rows(OverHttp(base), size, config)
        for i in range(1, config.cold_starts):  # one start is one sample on a shared machine: take a few
            say(f"{label(size)} store: cold start {i + 1}/{config.cold_starts}")
            with launched(store) as (_, healthy, first):
                launches.append((healthy, first))
        rows += cold_rows(label(size), launches, "opened, collections loaded")
    with opened_app(store) as app:
        rows += scaling_rows(app, config)
    rows += empty_cold_starts(folder, config.cold_starts)
    rows += empty_cold_starts(folder, config.cold_starts, embedder="use")  # issue 8: "embedder included"
    return Report(config, rows, time.perf_counter() - started, (load, os.getloadavg()[0]))


# -- rendering -----------------------------------------------------------------------------

HEADER = "| {} | via | {} | n | p50 ms | p95 ms | throughput | target | status |\n|---|---|---|---|---|---|---|---|---|"
SECTIONS = [("nodes", "Nodes (one client, sequential calls)", "node", "store"),
            ("store", "Store floor: bare pymilvus BM25 on the same collection and namespace", "measurement", "store"),
            ("scaling", "Scaling with session length (in process, {store} store)", "measurement", "session"),
            ("cold start", "Cold start: `python server.py` to the first answer", "measurement", "store")]


def number(value: float, unit: str = "") -> str:
    text = f"{value:,.1f}" if abs(value) < 100 else f"{value:,.0f}"
    return f"{text} {unit}".strip()


def cells(row: Row) -> list[str]:
    name = f"{row.name} — {row.detail}" if row.detail else row.name
    if row.server:  # over HTTP: what the server itself took, the rest is the wire and the client
        name += f" (server {number(percentile(row.server, 0.5))} / {number(percentile(row.server, 0.95))} ms)"
    if row.value is not None:
        figure = f"{row.value:.2f}×" if row.unit == "×" else number(row.value, row.unit)
        return [name, row.via, row.scale, "", figure, "", "", row.target.text if row.target else "", row.status]
    per = "items/s" if row.items > 1 else "req/s"
    rate = number(row.throughput, per) if row.items else ""
    return [name, row.via, row.scale, str(len(row.times)), number(row.p50), number(row.p95), rate,
            row.target.text if row.target else "", row.status]


def render(report: Report) -> str:
    """Return the report as Markdown: targets first, then one table per section."""
    config, rows = report.config, report.rows
    lines = [f"# Performance ({time.strftime('%Y-%m-%d')}, `{config.command}`, {report.seconds / 60:.1f} min)", "",
             f"{os.cpu_count()} cores, Python {platform.python_version()}, pymilvus {version('pymilvus')}, "
             f"milvus-lite {version('milvus-lite')}; Milvus Lite file; stores of "
             f"{', '.join(label(s) for s in config.sizes)} memories (four in ten archived turns), "
             f"{PER_SESSION} per session, {PER_AGENT // PER_SESSION} sessions per agent; retrieval filtered to one "
             f"namespace of {TARGET_MEMORIES}. 1-minute load average {report.load[0]:.1f} at the start, "
             f"{report.load[1]:.1f} at the end.",
             "", "## Targets (issue 8)", "", "| target | measurement | via | at | measured | status |",
             "|---|---|---|---|---|---|"]
    targeted = [r for r in rows if r.target]
    for row in sorted(targeted, key=lambda r: TARGET_ORDER.index(r.target)):  # type: ignore[arg-type]
        assert row.target is not None
        measured = getattr(row, row.target.metric)
        shown = f"{measured:.2f}×" if row.unit == "×" else number(
            measured, "items/s" if row.target.metric == "throughput" else "ms")
        if row.server and row.target.metric in ("p50", "p95"):
            shown += f" (server {number(percentile(row.server, 0.5 if row.target.metric == 'p50' else 0.95))})"
        lines.append(f"| {row.target.text} | {row.name} | {row.via} | {row.scale} | {shown} | {row.status} |")
    for section, title, first, scale in SECTIONS:
        lines += ["", f"## {title.format(store=label(max(config.sizes)))}", "", HEADER.format(first, scale)]
        chosen = [r for r in rows if r.section == section]
        # Group a node's rows together (stable: store sizes, then in-process before HTTP, stay in run order).
        names = list(dict.fromkeys(r.name for r in chosen))
        lines += ["| " + " | ".join(cells(r)) + " |" for r in sorted(chosen, key=lambda r: names.index(r.name))]
    lines += ["", "## Quoted for orientation, not measured here", "", "| system | figure | source |", "|---|---|---|"]
    lines += [f"| {what} | {figure} | {source} |" for what, figure, source in MEM0]
    lines += ["", "Throughput is 1 / mean latency of sequential calls from one client. HTTP rows go through "
              "`python server.py` (waitress) on loopback over one keep-alive connection with the `requests` "
              "client; \"server\" is the same percentile of what the server itself reported (Server-Timing), the "
              "rest is the wire and the client. Cold-start rows take "
              f"{config.cold_starts} launches per store, the first of which also serves the HTTP rows."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    variant = parser.add_mutually_exclusive_group()
    variant.add_argument("--quick", action="store_true", help="smoke variant, about a minute")
    variant.add_argument("--large", action="store_true", help="add a 100k-memory store (a longer run)")
    parser.add_argument("--out", type=Path, help="write the report here (default: bench/results/perf.md)")
    args = parser.parse_args()
    config = QUICK if args.quick else LARGE if args.large else Config()
    with tempfile.TemporaryDirectory(prefix="acn-perf-") as folder:
        report = run(config, Path(folder))
    text = report.markdown()
    print(text)
    out = args.out or (None if args.quick else RESULTS / ("perf-large.md" if args.large else "perf.md"))
    if out is not None:
        out.write_text(text, encoding="utf-8")
        say(f"wrote {out}")


if __name__ == "__main__":
    main()
