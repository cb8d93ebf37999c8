"""Session versions: rollback restores exactly, stale writers get 409, parallel writers lose nothing."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from flask import Flask
from flask.testing import FlaskClient
from hypothesis import given, settings
from hypothesis import strategies as st

from acn.storage.repositories.session_rows import chunk_text
from tests.conftest import assert_error, post


def record(client: FlaskClient, ns: dict[str, str], user: str, assistant: str, **extra: Any) -> Any:
    return post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": user},
                                                           {"role": "assistant", "content": assistant}], **extra})


def state(client: FlaskClient, ns: dict[str, str], **extra: Any) -> dict[str, Any]:
    response = post(client, "session_state", {**ns, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_every_change_is_a_version_and_rollback_restores_it_exactly(client: FlaskClient, ns: dict[str, str]) -> None:
    for i in range(1, 5):
        assert record(client, ns, f"第{i}步：参数P{i}设为{i * 10}", f"已设置P{i}={i * 10}").status_code == 200
    versions = post(client, "session_versions", ns).get_json()
    assert [v["version"] for v in versions["versions"]] == [1, 2, 3, 4] and versions["latest"] == 4
    assert all(v["reason"] == "record_turn" for v in versions["versions"])
    at_two = state(client, ns, version=2)
    rolled = post(client, "session_rollback", {**ns, "version": 2}).get_json()
    assert rolled["version"] == 5 and rolled["reason"] == "rollback to v2"
    now = state(client, ns)
    for field in ("turn", "buffer", "segments", "working_summary"):
        assert now[field] == at_two[field]
    assert now["turn"] == 2


def test_stale_expected_version_is_409_and_changes_nothing(client: FlaskClient, ns: dict[str, str]) -> None:
    first = record(client, ns, "订单号 ORD-1", "好的").get_json()
    assert first["version"] == 1
    record(client, ns, "订单号 ORD-2", "好的", expected_version=1)
    stale = record(client, ns, "订单号 ORD-3", "好的", expected_version=1)
    assert_error(stale, 409, "version_conflict")
    assert_error(post(client, "session_rollback", {**ns, "version": 1, "expected_version": 1}), 409)
    current = state(client, ns)
    assert current["version"] == 2
    assert "ORD-3" not in " ".join(m["content"] for m in current["buffer"])
    memories = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"], "kinds": "turn"}).get_json()
    assert "ORD-3" not in " ".join(m["content"] for m in memories["memories"])


def test_unknown_version_is_404(client: FlaskClient, ns: dict[str, str]) -> None:
    record(client, ns, "你好，我要退款", "好的")
    assert_error(post(client, "session_state", {**ns, "version": 9}), 404, "not_found")
    assert_error(post(client, "session_rollback", {**ns, "version": 9}), 404)


def test_parallel_record_turn_keeps_every_turn_exactly_once(app: Flask, ns: dict[str, str]) -> None:
    writers, per_writer = 8, 4

    def write(worker: int) -> list[int]:
        client = app.test_client()
        turns = []
        for i in range(per_writer):
            body = record(client, ns, f"写入者{worker}的第{i}条：编号 W{worker}-{i}", f"收到 W{worker}-{i}",
                          edit=False, extract=False).get_json()
            turns.append(body["turn"])
        return turns

    with ThreadPoolExecutor(max_workers=writers) as pool:
        turns = [t for result in pool.map(write, range(writers)) for t in result]
    total = writers * per_writer
    assert sorted(turns) == list(range(1, total + 1))
    final = state(app.test_client(), ns)
    assert final["version"] == total
    contents = [m["content"] for m in final["buffer"] if m["role"] == "user"]
    expected = {f"写入者{w}的第{i}条：编号 W{w}-{i}" for w in range(writers) for i in range(per_writer)}
    assert sorted(contents) == sorted(expected)
    archived = app.test_client().get("/v1/memories", query_string={
        "agent_id": ns["agent_id"], "kinds": "turn", "limit": 1000}).get_json()["memories"]
    assert len(archived) == 2 * total


def test_record_turn_numbers_turns_and_archives_raw_messages(client: FlaskClient, ns: dict[str, str]) -> None:
    body = record(client, ns, "好的", "好的呢").get_json()
    assert body["turn"] == 1 and len(body["archived_ids"]) == 2
    second = post(client, "record_turn", {**ns, "messages": [{"role": "assistant", "content": "补充：运费由商家承担"}]})
    assert second.get_json()["turn"] == 1
    third = record(client, ns, "我是VIP，不要给我推荐新品", "明白").get_json()
    assert third["turn"] == 2
    assert {m["kind"] for m in third["memories"]} >= {"identity"}
    raw = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"], "kinds": "turn"}).get_json()
    assert "好的" in [m["content"] for m in raw["memories"]]


def test_delete_namespace_removes_session_state(client: FlaskClient, ns: dict[str, str]) -> None:
    record(client, ns, "订单号 ORD-9", "好的")
    assert client.delete("/v1/memories", query_string=ns).status_code == 200
    assert state(client, ns)["version"] == 0
    assert post(client, "session_versions", ns).get_json()["versions"] == []


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=200),
       limit=st.integers(min_value=4, max_value=40))
def test_snapshot_chunks_are_maximal_whole_character_pieces(text: str, limit: int) -> None:
    chunks = chunk_text(text, limit)
    assert "".join(chunks) == text
    assert all(len(chunk.encode("utf-8")) <= limit for chunk in chunks)
    # Each piece but the last is as long as it can be: the next character would not have fitted.
    assert all(len((chunk + following[:1]).encode("utf-8")) > limit for chunk, following in zip(chunks, chunks[1:], strict=False))
    assert all(chunks[:-1])


def test_long_snapshots_are_stored_compressed_and_plain_ones_still_read(app: Flask, ns: dict[str, str]) -> None:
    # A long session's state is written compressed (each turn stores a version of it); snapshots written
    # plain, as earlier releases did, read back unchanged.
    from acn.common.auth import DEFAULT_TENANT
    from acn.common.conversation import SessionState
    from acn.common.models import Message, Namespace
    from acn.storage.repositories.session_rows import COMPRESSED, pack, unpack

    sessions = app.extensions["acn"].sessions
    namespace = Namespace(**ns)
    long_state = SessionState(turn=3, buffer=[Message(role="user", content=f"第{i}条：订单A{i:04d}金额{i * 7}元")
                                              for i in range(400)])
    with sessions.locked(DEFAULT_TENANT, namespace):
        written = sessions.commit(DEFAULT_TENANT, namespace, long_state, reason="test")
    rows = sessions.store.query(sessions.spec.name, sessions._rows(DEFAULT_TENANT, namespace, "snapshot"),
                                fields=["chunk", "version"], limit=100)
    stored = "".join(row["chunk"] for row in rows if row["version"] == written.version)
    assert stored.startswith(COMPRESSED) and len(stored) < len(long_state.model_dump_json()) / 2
    assert sessions.read(DEFAULT_TENANT, namespace, written.version).buffer == long_state.buffer
    # A version an earlier release wrote: the plain JSON in the chunk, no mark.
    old = long_state.model_copy(update={"version": written.version + 1, "turn": 4})
    old_text = old.model_dump_json()
    sessions.store.upsert(sessions.spec.name, [sessions._row(
        DEFAULT_TENANT, namespace, id=f"old-format-{ns['session_id']}", row="snapshot", version=old.version,
        part=0, parts=1, created_at=1, chunk=old_text, info={})])
    assert sessions.read(DEFAULT_TENANT, namespace, old.version).turn == 4
    assert pack('{"version": 1}') == '{"version": 1}' and unpack(pack(old_text)) == old_text
