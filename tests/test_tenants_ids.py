"""Ids scoped by tenant: what one tenant imports never meets, replaces or tells of another tenant's rows, and a
store written before ids were scoped is migrated at start (issue 34)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.memory_rows import memory_spec, to_record
from acn.storage.database.milvus import MilvusStore
from acn.storage.database.store_facts import FACT_ROW
from acn.storage.repositories.session_rows import session_spec
from tests.conftest import make_settings, post
from tests.redis_support import redis_server, replicas

KEY_A, KEY_B = "tenant-a-key-0123456789", "tenant-b-key-0123456789"
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"Authorization": f"Bearer {KEY_B}"}
NS = {"agent_id": "shared-agent", "session_id": "same-session"}


@pytest.fixture()
def two_tenants(tmp_path: Path) -> Iterator[Flask]:
    app = create_app(make_settings(tmp_path, api_keys=f"{KEY_A}:alpha,{KEY_B}:beta"))
    yield app
    app.extensions["acn"].close()


def row(memory_id: str, content: str, **extra: Any) -> dict[str, Any]:
    return {"id": memory_id, "kind": "fact", "content": content, "importance": 5, "scope": "session", **NS,
            "created_at": 1_700_000_000_000, "updated_at": 1_700_000_000_000, "version": 1, **extra}


def imported(client: FlaskClient, rows: list[dict[str, Any]], headers: dict[str, str]) -> Any:
    return client.post("/v1/memories/import", json={"memories": rows}, headers=headers)


def answer(response: Any) -> tuple[int, dict[str, Any]]:
    """The status and body a client sees, less the request id (random per request)."""
    body = dict(response.get_json())
    body.pop("request_id")
    return response.status_code, body


def content_of(client: FlaskClient, memory_id: str, headers: dict[str, str]) -> str | None:
    found = client.get(f"/v1/memories/{memory_id}", headers=headers)
    return str(found.get_json()["memory"]["content"]) if found.status_code == 200 else None


def test_an_import_of_ids_another_tenant_holds_is_as_for_unknown_ids(two_tenants: Flask) -> None:
    client = two_tenants.test_client()
    assert imported(client, [row(f"code-{n}", f"A 的验证码是{n}") for n in range(4)], A).status_code == 200
    # B probes four ids A holds and four nobody holds: the answers are the same, so they tell B nothing.
    held = answer(imported(client, [row(f"code-{n}", "probe") for n in range(4)], B))
    unknown = answer(imported(client, [row(f"free-{n}", "probe") for n in range(4)], B))
    assert held == unknown == (200, {"ok": True, "created": 4, "updated": 0, "unchanged": 0})
    assert [content_of(client, f"code-{n}", A) for n in range(4)] == [f"A 的验证码是{n}" for n in range(4)]
    assert [content_of(client, f"code-{n}", B) for n in range(4)] == ["probe"] * 4


def test_a_row_a_200_acknowledged_stays_readable_when_another_tenant_writes_its_id(two_tenants: Flask,
                                                                                     tmp_path: Path) -> None:
    client = two_tenants.test_client()
    assert imported(client, [row("turn_next", "B's squat")], B).get_json()["created"] == 1
    assert imported(client, [row("turn_next", "A's own row")], A).get_json()["created"] == 1
    assert content_of(client, "turn_next", B) == "B's squat"
    assert content_of(client, "turn_next", A) == "A's own row"
    two_tenants.extensions["acn"].close()
    again = create_app(make_settings(tmp_path, api_keys=f"{KEY_A}:alpha,{KEY_B}:beta"))
    try:  # after a restart too
        assert content_of(again.test_client(), "turn_next", B) == "B's squat"
        assert content_of(again.test_client(), "turn_next", A) == "A's own row"
    finally:
        again.extensions["acn"].close()


def test_a_tenant_restores_its_own_export_whatever_another_imported_first(two_tenants: Flask) -> None:
    client = two_tenants.test_client()
    assert post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": "我的验证码是4821"}]},
                headers=A).status_code == 200
    export = client.get("/v1/memories", query_string={"agent_id": NS["agent_id"]}, headers=A).get_json()["memories"]
    assert export
    assert client.delete("/v1/memories", query_string={"agent_id": NS["agent_id"]}, headers=A).status_code == 200
    assert imported(client, [{**m, "content": "B was here"} for m in export], B).status_code == 200
    restored = imported(client, export, A)
    assert restored.status_code == 200 and restored.get_json()["created"] == len(export)
    again = client.get("/v1/memories", query_string={"agent_id": NS["agent_id"]}, headers=A).get_json()["memories"]
    assert again == export


def test_two_tenants_importing_the_same_ids_at_once_both_keep_every_row(two_tenants: Flask) -> None:
    ids = [f"same-{n:03d}" for n in range(100)]
    answers: dict[str, Any] = {}

    def run(name: str, headers: dict[str, str]) -> None:
        answers[name] = imported(two_tenants.test_client(), [row(i, f"{name} {i}") for i in ids], headers)

    for trial in range(3):
        threads = [threading.Thread(target=run, args=(name, headers)) for name, headers in (("A", A), ("B", B))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        expected = {"created": 100, "updated": 0, "unchanged": 0} if trial == 0 else \
            {"created": 0, "updated": 0, "unchanged": 100}
        for name in ("A", "B"):
            assert {k: answers[name].get_json()[k] for k in expected} == expected
    client = two_tenants.test_client()
    for name, headers in (("A", A), ("B", B)):
        listed = client.get("/v1/memories", query_string={"agent_id": NS["agent_id"], "limit": 1000},
                            headers=headers).get_json()["memories"]
        assert sorted((m["id"], m["content"]) for m in listed) == [(i, f"{name} {i}") for i in ids]


def test_one_tenant_racing_itself_over_the_same_ids_answers_per_row(two_tenants: Flask) -> None:
    ids = [f"race-{n:03d}" for n in range(100)]
    answers: list[Any] = []

    def run() -> None:
        answers.append(imported(two_tenants.test_client(), [row(i, f"A {i}") for i in ids], A).get_json())

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted((a["created"], a["unchanged"]) for a in answers) == [(0, 100), (100, 0)]
    listed = two_tenants.test_client().get("/v1/memories", query_string={"agent_id": NS["agent_id"], "limit": 1000},
                                           headers=A).get_json()["memories"]
    assert sorted(m["id"] for m in listed) == ids  # one row each, none lost, none twice


def test_a_store_written_before_ids_were_scoped_is_migrated_at_start(tmp_path: Path) -> None:
    from acn.common.models import Memory

    app = create_app(make_settings(tmp_path, api_keys=f"{KEY_A}:alpha,{KEY_B}:beta"))
    app.extensions["acn"].close()
    store = MilvusStore(str(tmp_path / "memory.db")).open()
    try:  # rows as the code before scoping stored them: the id itself is the primary key; no "ids_scoped" fact
        store.ensure(memory_spec("acn", 0))
        store.ensure(session_spec("acn"))
        old = [Memory.model_validate(row(f"old-{n}", f"alpha 旧记录 {n}")) for n in range(30)]
        store.upsert("acn_memories", [{**to_record(m, "alpha", None), "id": m.id} for m in old])
        store.delete("acn_sessions", Filter("row == {r} and agent_id == {n}", {"r": FACT_ROW, "n": "ids_scoped"}))
        assert len(store.query("acn_memories", Filter("id in {i}", {"i": [m.id for m in old]}), fields=["id"],
                               limit=100)) == 30
    finally:
        store.close()
    migrated = create_app(make_settings(tmp_path, api_keys=f"{KEY_A}:alpha,{KEY_B}:beta"))
    try:
        client = migrated.test_client()
        assert content_of(client, "old-7", A) == "alpha 旧记录 7"
        assert content_of(client, "old-7", B) is None
        assert imported(client, [row("old-7", "B's own")], B).get_json()["created"] == 1  # no 409, no overwrite
        assert imported(client, [row("old-7", "alpha 改过")], A).get_json()["updated"] == 1  # one row, replaced
        listed = client.get("/v1/memories", query_string={"agent_id": NS["agent_id"], "limit": 1000},
                            headers=A).get_json()["memories"]
        assert len(listed) == 30 and {m["content"] for m in listed if m["id"] == "old-7"} == {"alpha 改过"}
        assert content_of(client, "old-7", B) == "B's own"
    finally:
        migrated.extensions["acn"].close()


def test_archive_rows_of_a_request_killed_before_its_commit_are_swept(tmp_path: Path) -> None:
    """What a replica SIGKILLed between its archive write and its commit leaves (the first half of record_turn,
    run by record_turn's own functions), then the next request of the session on a fresh process."""
    from acn.common.conversation import group_turns
    from acn.common.models import Message, Namespace
    from acn.memory.archive import archive_new_turns

    app = create_app(make_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        assert post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": "first turn"}]}
                    ).status_code == 200
        namespace = Namespace(**NS)
        with runtime.sessions.locked("default", namespace):
            state = runtime.sessions.head("default", namespace)
            runtime.sessions.begin_archive("default", namespace, state)
            killed = [Message(role="user", content="never acknowledged zebra", turn=state.turn + 1)]
            archive_new_turns(runtime.memories, "default", namespace, group_turns(killed, state.turn + 1))
    finally:
        runtime.close()  # the process goes; its archive rows stay, its commit never came
    again = create_app(make_settings(tmp_path))
    try:
        client = again.test_client()
        # Before the session's next turn sweeps them, the rows are there but no reader serves them: not retrieve,
        # not focused assemble (its hits and the messages around them).
        killed_rows = client.get("/v1/memories", query_string={**NS, "kinds": "turn"}).get_json()["memories"]
        assert [m["content"] for m in killed_rows if m["turn_range"][0] == 2] == ["never acknowledged zebra"]
        found = post(client, "memory_retrieve", {**NS, "query": "zebra", "kinds": ["turn"]}).get_json()["memories"]
        assert [m["content"] for m in found] == []
        context = post(client, "assemble", {**NS, "user_input": "zebra? first turn", "mode": "focused",
                                             "max_tokens": 2000}).get_json()
        contents = [str(message["content"]) for message in context["messages"]]
        assert any("first turn" in content for content in contents)
        assert not any("never acknowledged" in content for content in contents)
        recorded = post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": "second turn"}]})
        assert recorded.get_json()["turn"] == 2
        archive = client.get("/v1/memories", query_string={**NS, "kinds": "turn"}).get_json()["memories"]
        assert sorted((m["turn_range"][0], m["content"]) for m in archive) == [(1, "first turn"), (2, "second turn")]
        found = post(client, "memory_retrieve", {**NS, "query": "zebra", "kinds": ["turn"]}).get_json()["memories"]
        assert [m["content"] for m in found if "zebra" in m["content"]] == []
    finally:
        again.extensions["acn"].close()


def test_one_tenant_importing_the_same_ids_through_two_replicas_answers_per_row(lite_server: str) -> None:
    ids = [f"replica-{n:03d}" for n in range(100)]
    prefix = "imp" + uuid.uuid4().hex[:8]  # the Milvus server is shared by the test session
    with redis_server() as redis, replicas(lite_server, 2, ACN_REDIS_URL=redis.url,
                                           ACN_COLLECTION_PREFIX=prefix) as started:
        barrier = threading.Barrier(2)
        answers: list[dict[str, Any]] = []

        def run(base: str) -> None:
            barrier.wait()
            answers.append(requests.post(f"{base}/v1/memories/import", timeout=120,
                                         json={"memories": [row(i, f"A {i}") for i in ids]}).json())

        threads = [threading.Thread(target=run, args=(base,)) for base, _ in started]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted((a["created"], a["unchanged"]) for a in answers) == [(0, 100), (100, 0)], answers
        listed = requests.get(f"{started[0][0]}/v1/memories", timeout=60,
                              params={"agent_id": NS["agent_id"], "limit": 1000}).json()["memories"]
        assert sorted(m["id"] for m in listed) == ids
