"""Several server processes on one Milvus (a Lite server by URI) and one Redis, under faults.

Every test here runs real processes on loopback: 3 replicas of `python server.py`, a Milvus Lite server and a
redis-server. Clients spread their turns over the replicas; afterwards every acknowledged turn must be in its
session exactly once and the session's versions must be 1, 2, 3 … with no gap.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from tests.conftest import free_port, wait_for_port
from tests.fake_llm import FakeLLM
from tests.redis_support import RedisServer, redis_server, replicas, start_replica

LEASE_MS = "1500"
CLIENTS = 12
SESSIONS = 4
TURNS = 8  # per client: 96 turns over 4 sessions


@dataclass
class Cluster:
    milvus_uri: str
    redis: RedisServer
    servers: list[tuple[str, subprocess.Popen[bytes]]]


@pytest.fixture(scope="module")
def cluster(lite_server: str) -> Iterator[Cluster]:
    with redis_server() as redis, replicas(lite_server, 3, ACN_REDIS_URL=redis.url, ACN_REDIS_LEASE_MS=LEASE_MS,
                                           ACN_REDIS_LOCK_WAIT_SECONDS="20") as servers:
        yield Cluster(lite_server, redis, servers)


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def turn_body(agent: str, session: str, text: str) -> dict[str, Any]:
    # Only the session write path: no edit, extraction or compaction, so each turn is one user message.
    return {"agent_id": agent, "session_id": session, "messages": [{"role": "user", "content": text}],
            "edit": False, "extract": False, "compact": False}


@dataclass
class Storm:
    """12 clients, each writing its turns into one of 4 shared sessions through the replicas in turn."""

    agent: str
    urls: list[str]
    acked: dict[str, list[str]] = field(default_factory=dict)
    failures: Counter[str] = field(default_factory=Counter)
    refusals: list[str] = field(default_factory=list)  # the answers behind failures, for the assertion's message
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acknowledged(self) -> int:
        with self.lock:
            return sum(len(texts) for texts in self.acked.values())

    def session(self, client: int) -> str:
        return f"shared-{client % SESSIONS}"

    def run(self, turns: int = TURNS, during: Any = None) -> None:
        threads = [threading.Thread(target=self._client, args=(client, turns)) for client in range(CLIENTS)]
        for thread in threads:
            thread.start()
        if during is not None:
            during()
        for thread in threads:
            thread.join(timeout=300)

    def _client(self, client: int, turns: int) -> None:
        http = requests.Session()
        for index in range(turns):
            text = f"client {client} turn {index}"
            url = self.urls[(client + index) % len(self.urls)]
            try:
                response = http.post(f"{url}/v1/nodes/record_turn", json=turn_body(self.agent, self.session(client),
                                                                                    text), timeout=60)
            except requests.RequestException:
                with self.lock:
                    self.failures["connection"] += 1
                continue
            with self.lock:
                if response.status_code == 200:
                    self.acked.setdefault(self.session(client), []).append(text)
                else:
                    self.failures[f"{response.status_code} {response.json().get('code')}"] += 1
                    self.refusals.append(f"{url}: {response.json().get('error')}"[:500])
        http.close()


def stored(url: str, agent: str, session: str) -> tuple[list[str], list[int], int]:
    """Return the session's user messages, its kept version numbers and its head version."""
    ns = {"agent_id": agent, "session_id": session}
    state = requests.post(f"{url}/v1/nodes/session_state", json=ns, timeout=30).json()
    versions = requests.post(f"{url}/v1/nodes/session_versions", json=ns, timeout=30).json()
    texts = [m["content"] for m in state["buffer"] if m["role"] == "user"]
    return texts, [v["version"] for v in versions["versions"]], versions["latest"]


def assert_exactly_once(storm: Storm, url: str) -> int:
    """Every acknowledged turn is stored once, nothing twice, versions 1..N for N stored turns."""
    total = 0
    for client in range(SESSIONS):
        session = storm.session(client)
        texts, versions, latest = stored(url, storm.agent, session)
        counts = Counter(texts)
        assert [text for text, n in counts.items() if n > 1] == [], f"{session}: a turn stored twice"
        missing = [text for text in storm.acked.get(session, []) if text not in counts]
        assert missing == [], f"{session}: {len(missing)} acknowledged turns lost"
        assert versions == list(range(1, latest + 1)) and latest == len(texts), f"{session}: versions not contiguous"
        total += len(texts)
    return total


def test_twelve_clients_over_three_replicas_lose_nothing(cluster: Cluster) -> None:
    storm = Storm(agent=unique("storm"), urls=[url for url, _ in cluster.servers])
    storm.run()
    assert storm.failures == Counter(), "; ".join(storm.refusals)
    assert sum(len(texts) for texts in storm.acked.values()) == CLIENTS * TURNS
    assert assert_exactly_once(storm, cluster.servers[1][0]) == CLIENTS * TURNS


def test_redis_stopped_mid_run_answers_503_then_recovers(cluster: Cluster) -> None:
    url = cluster.servers[0][0]
    agent = unique("outage")
    body = turn_body(agent, "s", "before the outage")
    assert requests.post(f"{url}/v1/nodes/record_turn", json=body, timeout=30).status_code == 200
    cluster.redis.stop()
    try:
        for base, _ in cluster.servers:
            refused = requests.post(f"{base}/v1/nodes/record_turn", json=turn_body(agent, "s", "during"),
                                    timeout=30)
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "coordination_unavailable" and refused.headers["Retry-After"]
        # Reads need no lease: they still answer, and nothing was written without one.
        texts, versions, latest = stored(url, agent, "s")
        assert (texts, versions, latest) == (["before the outage"], [1], 1)
    finally:
        cluster.redis.start()  # same port, empty: no restart of the replicas
    deadline = time.monotonic() + 30
    answers = []
    for base, _ in cluster.servers:
        while True:
            answer = requests.post(f"{base}/v1/nodes/record_turn", json=turn_body(agent, "s", f"after {base}"),
                                   timeout=30)
            answers.append(answer.status_code)
            if answer.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
    texts, versions, latest = stored(url, agent, "s")
    assert latest == 4 and versions == [1, 2, 3, 4], answers
    assert texts == ["before the outage", *(f"after {base}" for base, _ in cluster.servers)]


def test_sigkill_of_a_replica_mid_storm_loses_no_acknowledged_turn(cluster: Cluster) -> None:
    # A replica of its own to kill, so the module's three stay up; clients use all four.
    port = free_port()
    victim = start_replica(cluster.milvus_uri, port, ACN_REDIS_URL=cluster.redis.url, ACN_REDIS_LEASE_MS=LEASE_MS,
                           ACN_REDIS_LOCK_WAIT_SECONDS="20")
    try:
        wait_for_port(port, timeout=90, process=victim)
        storm = Storm(agent=unique("killed"), urls=[f"http://127.0.0.1:{port}", *(url for url, _ in cluster.servers)])

        def kill_when_busy() -> None:
            deadline = time.monotonic() + 120
            # Counted, not advanced: a counter the watcher advanced itself killed ~0.6 s in, whatever was acknowledged.
            while storm.acknowledged() < 30 and time.monotonic() < deadline:  # noqa: B023 - the storm's own count
                time.sleep(0.02)
            victim.send_signal(signal.SIGKILL)

        storm.run(during=kill_when_busy)
        assert victim.wait(timeout=10) == -signal.SIGKILL
        # Only the killed replica's clients failed, by a broken connection; nobody was refused or timed out.
        assert set(storm.failures) <= {"connection"}, "; ".join(storm.refusals)
        assert storm.failures["connection"] >= 1
        stored_turns = assert_exactly_once(storm, cluster.servers[0][0])
        acked = sum(len(texts) for texts in storm.acked.values())
        # A turn the victim committed but could not acknowledge may be stored: never more than one per client.
        assert acked <= stored_turns <= acked + CLIENTS
    finally:
        if victim.poll() is None:
            victim.kill()
            victim.wait()


def commit_while_paused(cluster: Cluster, fake_llm: FakeLLM, path: str, body: dict[str, Any],
                        agent: str) -> tuple[dict[str, Any], str]:
    """Send `body` to a fresh replica that stalls in a slow LLM compaction while holding the session's lease; pause
    it past the lease (SIGSTOP), let another replica write turn 4, resume it; return its late answer and the other
    replica's URL. The session first gets three turns through the other replica."""
    fake_llm.reply_slow(4.0, {"segments": []})
    port = free_port()
    paused = start_replica(cluster.milvus_uri, port, ACN_REDIS_URL=cluster.redis.url, ACN_REDIS_LEASE_MS="1000",
                           ACN_LLM_BASE_URL=fake_llm.base_url, ACN_LLM_TIMEOUT_SECONDS="30",
                           ACN_LLM_RETRIES="0")
    other = cluster.servers[0][0]
    try:
        wait_for_port(port, timeout=90, process=paused)
        for index in range(3):
            text = f"turn {index} " + "the transfer timeout is 30 seconds. " * 5
            assert requests.post(f"{other}/v1/nodes/record_turn", timeout=30,
                                 json=turn_body(agent, "s", text)).status_code == 200
        late: dict[str, Any] = {}

        def send() -> None:
            answer = requests.post(f"http://127.0.0.1:{port}{path}", timeout=60, json=body)
            late["status"], late["body"] = answer.status_code, answer.json()

        waiter = threading.Thread(target=send)
        waiter.start()
        deadline = time.monotonic() + 30
        while not fake_llm.requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert fake_llm.requests, "the compaction never reached the LLM"
        os.kill(paused.pid, signal.SIGSTOP)  # now it holds the lease and cannot renew it
        try:
            time.sleep(2.0)  # twice the lease
            moved = requests.post(f"{other}/v1/nodes/record_turn", timeout=30,
                                  json=turn_body(agent, "s", "written while the other replica was paused"))
            assert moved.status_code == 200 and moved.json()["version"] == 4
        finally:
            os.kill(paused.pid, signal.SIGCONT)
        waiter.join(timeout=60)
        return late, other
    finally:
        if paused.poll() is None:
            os.kill(paused.pid, signal.SIGCONT)
            paused.terminate()
            paused.wait(timeout=30)


def test_a_replica_paused_past_its_lease_cannot_commit_late(cluster: Cluster, fake_llm: FakeLLM) -> None:
    agent = unique("paused")
    body = {"agent_id": agent, "session_id": "s", "force": True, "keep_recent": 0, "engine": "llm"}
    late, other = commit_while_paused(cluster, fake_llm, "/v1/nodes/compact", body, agent)
    assert late["status"] == 409 and late["body"]["code"] == "lease_lost", late
    texts, versions, latest = stored(other, agent, "s")
    assert latest == 4 and versions == [1, 2, 3, 4]
    assert texts[-1] == "written while the other replica was paused"


def test_a_turn_refused_late_leaves_no_archive_rows(cluster: Cluster, fake_llm: FakeLLM) -> None:
    # record_turn archives the turn's raw messages before its commit; a refused commit must take them back, or
    # recall serves a turn the session never recorded (and twice once the client retries).
    agent = unique("paused-turn")
    marker = "ZEBRA7731 refused late"
    body = {**turn_body(agent, "s", marker), "compact": True,
            "compaction": {"engine": "llm", "context_window": 256, "trigger_ratio": 0.1, "segment_size": 1,
                           "keep_recent": 0, "wait_for_segment": False}}
    late, other = commit_while_paused(cluster, fake_llm, "/v1/nodes/record_turn", body, agent)
    assert late["status"] == 409 and late["body"]["code"] == "lease_lost", late
    texts, _, latest = stored(other, agent, "s")
    assert latest == 4 and marker not in texts
    found = requests.post(f"{other}/v1/nodes/memory_retrieve", timeout=30, json={
        "agent_id": agent, "session_id": "s", "query": "ZEBRA7731", "kinds": ["turn"], "top_k": 20}).json()
    assert found["ok"] and [m for m in found["memories"] if "ZEBRA7731" in m["content"]] == []
