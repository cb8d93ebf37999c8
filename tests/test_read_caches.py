"""What this process keeps in memory for a Lite file stays true: every write and delete is reflected at once.

The dedup index of batch writes, the superseded values assembly withholds and the session archives that
neighbour expansion reads are kept between requests (a Lite file has one writer: this process). These
tests change the store through every path between two reads and check the second read sees the change.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.storage.database.lite.read_cache import SessionArchive
from acn.storage.database.memory_rows import new_memory_id
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import post


def write(client: FlaskClient, ns: dict[str, str], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    response = post(client, "memory_write", {**ns, "items": items})
    assert response.status_code == 200, response.get_json()
    return list(response.get_json()["results"])


def test_batch_dedup_sees_memories_written_by_other_batches(client: FlaskClient, ns: dict[str, str]) -> None:
    # A batch of facts keeps its dedup index; a batch of other kinds then writes a fact it must learn about.
    assert write(client, ns, [{"kind": "fact", "content": "仓库在上海浦东张江路100号"}])[0]["action"] == "added"
    write(client, ns, [{"kind": "fact", "content": "客户的发票抬头是星辰科技有限公司"},
                       {"kind": "decision", "content": "退款走原路返回"}])
    again = write(client, ns, [{"kind": "fact", "content": "客户的发票抬头是星辰科技有限公司"}])
    assert again[0]["action"] == "duplicate"


def test_batch_dedup_forgets_a_deleted_memory(client: FlaskClient, ns: dict[str, str]) -> None:
    first = write(client, ns, [{"kind": "fact", "content": "会员等级是黑金卡"}])[0]
    assert write(client, ns, [{"kind": "fact", "content": "会员等级是黑金卡"}])[0]["action"] == "duplicate"
    assert client.delete(f"/v1/memories/{first['id']}").status_code == 200
    after = write(client, ns, [{"kind": "fact", "content": "会员等级是黑金卡"}])[0]
    assert after["action"] == "added" and after["id"] != first["id"]


def test_a_value_superseded_after_an_assemble_is_withheld_by_the_next(client: FlaskClient,
                                                                      ns: dict[str, str]) -> None:
    write(client, ns, [{"kind": "fact", "content": "对账接口的超时当时配置为30秒"},
                       {"kind": "decision", "content": "超时时间设为30秒", "key": "超时"}])
    body = {**ns, "user_input": "对账接口的超时是多少？", "mode": "focused", "max_tokens": 1000}
    before = post(client, "assemble", body).get_json()
    assert "30秒" in before["memory_text"]
    write(client, ns, [{"kind": "decision", "content": "超时改成45秒", "key": "超时"}])
    after = post(client, "assemble", body).get_json()
    assert "30秒" not in after["prompt"]
    assert [d["reason"] for d in after["dropped"] if d["layer"] == "memory"] == ["states a value superseded later"]


def archived(namespace: Namespace, turn: int, text: str, stamp: int) -> Memory:
    return Memory(id=new_memory_id(), kind="turn", content=text, scope="session", agent_id=namespace.agent_id,
                  session_id=namespace.session_id, created_at=stamp, updated_at=stamp, version=1, importance=0.3, turn_range=[turn, turn],
                  meta={"role": "user", "message_index": 0})


def test_session_archive_reads_follow_writes_and_deletes(app: Flask, ns: dict[str, str]) -> None:
    memories: MemoryRepository = app.extensions["acn"].memories
    namespace = Namespace(**ns)
    memories.save(DEFAULT_TENANT, [archived(namespace, 1, "第一轮", 1)])
    assert [m.content for m in memories.archived_messages(DEFAULT_TENANT, namespace, [1, 2])] == ["第一轮"]
    memories.save(DEFAULT_TENANT, [archived(namespace, 2, "第二轮", 2)])
    assert [m.content for m in memories.archived_messages(DEFAULT_TENANT, namespace, [1, 2])] == ["第一轮", "第二轮"]
    assert [m.content for m in memories.archived_messages(DEFAULT_TENANT, namespace, [2])] == ["第二轮"]
    memories.delete_namespace(DEFAULT_TENANT, namespace.agent_id, namespace.session_id, None)
    assert memories.archived_messages(DEFAULT_TENANT, namespace, [1, 2]) == []


def test_session_archive_reads_are_the_same_against_a_server(lite_server: str, tmp_path: Any,
                                                             ns: dict[str, str]) -> None:
    # Against a server other processes may write: nothing is cached, every read goes to the store.
    from acn.server import create_app
    from tests.conftest import make_settings

    app = create_app(make_settings(tmp_path, milvus_uri=lite_server))
    try:
        test_session_archive_reads_follow_writes_and_deletes(app, ns)
    finally:
        app.extensions["acn"].close()


def test_batch_dedup_sees_shared_memories_another_agent_wrote(client: FlaskClient, ns: dict[str, str]) -> None:
    # The dedup index is kept per agent; a shared memory written by another agent must still be seen.
    other = {**ns, "agent_id": ns["agent_id"] + "-other"}
    write(client, ns, [{"kind": "knowledge", "content": "退货运费由商家承担", "scope": "shared"}])
    write(client, other, [{"kind": "knowledge", "content": "七天无理由退货不含定制商品", "scope": "shared"}])
    again = write(client, ns, [{"kind": "knowledge", "content": "七天无理由退货不含定制商品", "scope": "shared"}])
    assert again[0]["action"] == "duplicate"



class LookupsOnly(Mapping[str, Memory]):
    """A session archive's messages by id that may be looked up but not gone over (that would cost the session)."""

    def __init__(self, by_id: dict[str, Memory]) -> None:
        self._by_id = by_id

    def __getitem__(self, key: str) -> Memory:
        return self._by_id[key]

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("went over every archived message of the session")

    def __len__(self) -> int:
        return len(self._by_id)


def test_the_ids_a_session_archive_lacks_are_found_by_lookups(app: Flask, ns: dict[str, str]) -> None:
    # Issue 47: `set(ids) - by_id.keys()` went over every message of the session, at every assemble.
    memories: MemoryRepository = app.extensions["acn"].memories
    namespace = Namespace(**ns)
    messages = [archived(namespace, turn, f"第{turn}轮", turn) for turn in range(1, 301)]
    memories.save(DEFAULT_TENANT, messages)
    asked = [messages[7].id, "absent-1", messages[250].id, "absent-2"]
    assert memories.kept.absent_archive_ids(DEFAULT_TENANT, namespace, asked) == {"absent-1", "absent-2"}
    archive = SessionArchive(messages)
    archive.by_id = LookupsOnly(archive.by_id)  # type: ignore[assignment]
    assert archive.absent(asked) == {"absent-1", "absent-2"}
    assert archive.absent([]) == set()
