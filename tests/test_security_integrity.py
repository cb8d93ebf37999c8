"""Issue 16 M1, M2, L3, L5: what one request stores cannot break later reads; long input, orphans, rollbacks."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.common.conversation import SessionState
from acn.common.models import Memory, Message, Namespace
from acn.storage.database.memory_rows import new_memory_id
from tests.conftest import assert_error, post

TENANT = "default"


def record(client: FlaskClient, ns: dict[str, str], messages: list[dict[str, Any]], **extra: Any) -> Any:
    return post(client, "record_turn", {**ns, "messages": messages, **extra})


def assemble(client: FlaskClient, ns: dict[str, str], user_input: str, **extra: Any) -> dict[str, Any]:
    response = post(client, "assemble", {**ns, "user_input": user_input, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def assert_valid_chat(messages: list[dict[str, Any]]) -> None:
    """Assert the OpenAI rule: every tool message answers a call of the assistant message before its run of tool
    messages, and every such call is answered."""
    open_calls: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message.get("tool_call_id") in open_calls, f"orphan tool message {message}"
            open_calls.discard(message["tool_call_id"])
            continue
        assert not open_calls, f"unanswered tool calls {open_calls}"
        open_calls = {call["id"] for call in message.get("tool_calls") or []}
    assert not open_calls, f"unanswered tool calls {open_calls}"


def repository(app: Flask, name: str) -> Any:
    return getattr(app.extensions["acn"].deps(TENANT), name)


# -- M1: reserved meta --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["part", "message_index", "parts"])
@pytest.mark.parametrize("value", ["abc", None, [1], {"a": 1}, -1, True, 1.5])
def test_reserved_meta_fields_are_refused_on_the_way_in(client: FlaskClient, ns: dict[str, str], field: str,
                                                        value: Any) -> None:
    response = record(client, ns, [{"role": "user", "content": "hello there", "meta": {field: value}}])
    body = assert_error(response, 422, "validation_error")
    assert f"meta.{field}" in body["error"] and "messages.0" in body["error"]
    written = post(client, "memory_write", {**ns, "items": [{"content": "a fact", "meta": {field: value}}]})
    assert f"meta.{field}" in assert_error(written, 422, "validation_error")["error"]


def test_reserved_meta_fields_holding_integers_are_accepted(client: FlaskClient, ns: dict[str, str]) -> None:
    response = record(client, ns, [{"role": "user", "content": "hello there", "meta": {"part": 0, "parts": 1,
                                                                                       "message_index": 3}}])
    assert response.status_code == 200, response.get_data(as_text=True)


def test_a_stored_row_the_server_cannot_read_is_skipped_logged_and_counted(app: Flask, client: FlaskClient,
                                                                         ns: dict[str, str],
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    for turn in range(1, 4):
        assert record(client, ns, [{"role": "user", "content": f"the warehouse code for lot {turn} is W{turn}77"},
                                   {"role": "assistant", "content": "noted"}]).status_code == 200
    # Written through the repository, as a row stored before requests were checked would be.
    memories = repository(app, "memories")
    now = memories.now_ms(TENANT, Namespace(**ns))
    bad = [Memory(id=new_memory_id(), kind="turn", content=f"the warehouse code for the annex is broken {i}",
                  importance=3, scope="session", created_at=now, updated_at=now, version=1, turn_range=[2, 2],
                  meta={"role": "user", **meta}, **ns)
           for i, meta in enumerate([{"part": "abc"}, {"message_index": None}, {"part": [1]},
                                     {"message_index": {"x": 1}}])]
    memories.save(TENANT, bad)
    # And a snapshot whose buffer holds such a message (stored before the check): it still loads.
    sessions = repository(app, "sessions")
    with sessions.locked(TENANT, Namespace(**ns)):
        head = sessions.head(TENANT, Namespace(**ns))
        odd = Message(role="user", content="an odd one", turn=4, meta={"part": "abc", "message_index": [2]})
        sessions.commit(TENANT, Namespace(**ns), head.model_copy(update={"buffer": [*head.buffer, odd], "turn": 4}),
                        reason="test")
    for mode in ("focused", "auto"):
        body = assemble(client, ns, "what is the warehouse code for the annex?", mode=mode, messages=[],
                        max_tokens=4000)
        skipped = {d["id"] for d in body["dropped"] if d["reason"].startswith("stored row cannot be read")}
        assert skipped and skipped <= {m.id for m in bad}
        assert "broken" not in body["memory_text"]
        assert "W277" in body["memory_text"]  # the readable rows are still served
    assert "skips stored row" in caplog.text
    assert "an odd one" in assemble(client, ns, "hello", mode="snapshot")["history_text"]
    stored = post(client, "session_state", {**ns, "version": head.version + 1})  # read back from the store
    assert stored.status_code == 200 and stored.get_json()["buffer"][-1]["meta"]["part"] == "abc"
    page = client.get(f"/ui/agents/{ns['agent_id']}/sessions/{ns['session_id']}")
    assert page.status_code == 200, page.get_data(as_text=True)[:500]
    assert "W177" in page.get_data(as_text=True)
    metrics = client.get("/metrics").get_data(as_text=True)
    assert 'acn_assemble_repairs_total{what="unreadable_row"}' in metrics


# -- M2: long input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["focused", "auto", "snapshot"])
def test_long_user_input_is_retrieved_for_not_a_500(client: FlaskClient, ns: dict[str, str], mode: str) -> None:
    assert record(client, ns, [{"role": "user", "content": "the invoice number is INV-4471"}]).status_code == 200
    long_input = "filler text " * 1000 + "what was the invoice number?"
    assert len(long_input) > 8000
    body = assemble(client, ns, long_input, mode=mode, max_tokens=200_000, messages=[])
    assert body["messages"][-1]["content"] == long_input
    assert "INV-4471" in body["memory_text"]  # retrieval used the end of the input, where the question is


def test_focused_assemble_that_asks_for_no_memories_is_not_a_500(client: FlaskClient, ns: dict[str, str]) -> None:
    assert record(client, ns, [{"role": "user", "content": "the invoice number is INV-4471"}]).status_code == 200
    body = assemble(client, ns, "what was the invoice number?", mode="focused", top_k=0, archive_top_k=0)
    assert body["memory_text"] == ""


def test_dify_extension_with_a_long_query_answers(client: FlaskClient, ns: dict[str, str]) -> None:
    written = post(client, "memory_write", {**ns, "items": [{"content": "the depot is in Harbin", "scope": "agent"}]})
    assert written.status_code == 200, written.get_data(as_text=True)
    query = "x " * 5000 + "where is the depot?"
    response = client.post("/v1/dify/extension", json={"point": "app.external_data_tool.query",
                                                       "params": {"app_id": ns["agent_id"], "query": query}})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert "Harbin" in response.get_json()["result"]


def test_record_turn_edits_a_buffer_longer_than_an_edit_context_request(app: Flask, client: FlaskClient,
                                                                        ns: dict[str, str]) -> None:
    # A session recorded with compaction off holds 5,000 buffered messages: more than edit_context's own request
    # accepts. (Stored through the repository: 10 record_turn calls of 500 messages take minutes.)
    buffer = [Message(role="user" if i % 2 == 0 else "assistant", content=f"message {i}", turn=i // 2 + 1)
              for i in range(5000)]
    sessions = repository(app, "sessions")
    with sessions.locked(TENANT, Namespace(**ns)):
        sessions.commit(TENANT, Namespace(**ns), SessionState(buffer=buffer, turn=2500, archived_turn=2500),
                        reason="test")
    # (dedupe off: its pairwise comparison over 5,000 messages takes a minute and a half, a separate matter)
    response = record(client, ns, [{"role": "user", "content": "one more"}], compact=False, extract=False,
                      rules={"dedupe": False})
    assert response.status_code == 200, response.get_data(as_text=True)[:300]
    assert response.get_json()["buffer_messages"] == 5001


# -- L3: the session lock map -----------------------------------------------------------------------------------


def test_session_lock_map_keeps_no_entry_for_sessions_no_longer_in_use(app: Flask, client: FlaskClient,
                                                                      ns: dict[str, str]) -> None:
    sessions = repository(app, "sessions")
    for i in range(300):  # requests that store nothing (a stale expected_version) on as many sessions
        session = {**ns, "session_id": f"{ns['session_id']}-{i}"}
        assert_error(record(client, session, [{"role": "user", "content": "hi"}], expected_version=7), 409)
    for i in range(20):
        session = {**ns, "session_id": f"{ns['session_id']}-ok-{i}"}
        assert record(client, session, [{"role": "user", "content": "hi"}]).status_code == 200
        assert post(client, "session_rollback", {**session, "version": 1}).status_code == 200
    assert len(sessions._locks) == 0


def test_session_lock_is_shared_while_held_and_reentrant(app: Flask, ns: dict[str, str]) -> None:
    sessions = repository(app, "sessions")
    namespace = Namespace(**ns)
    with sessions.locked(TENANT, namespace):
        with sessions.locked(TENANT, namespace):  # the same thread again (an RLock)
            assert len(sessions._locks) == 1
        assert len(sessions._locks) == 1  # still held: the entry stays
    assert len(sessions._locks) == 0


# -- L5: content, orphan tool messages, rolled-back turns -------------------------------------------------------


@pytest.mark.parametrize("message", [
    {"role": "user", "content": None},
    {"role": "user", "content": 42},
    {"role": "user", "content": {"text": "hi"}},
    {"role": "user", "content": True},
    {"role": "assistant", "content": None},
    {"role": "user", "content": ["hi", "there"]},
])
def test_content_that_is_not_text_is_refused(client: FlaskClient, ns: dict[str, str],
                                             message: dict[str, Any]) -> None:
    body = assert_error(record(client, ns, [message]), 422, "validation_error")
    assert "messages.0" in body["error"] and "content" in body["error"]


def test_openai_content_shapes_are_accepted(client: FlaskClient, ns: dict[str, str]) -> None:
    call = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    response = record(client, ns, [
        {"role": "user", "content": [{"type": "text", "text": "look it up"}, {"type": "image_url",
                                                                             "image_url": {"url": "x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "found"},
        {"role": "assistant", "content": "it is found"},
    ])
    assert response.status_code == 200, response.get_data(as_text=True)
    state = post(client, "session_state", ns).get_json()
    assert state["buffer"][0]["content"] == "look it up"


def test_assemble_output_never_holds_an_orphan_tool_message_or_an_unanswered_call(client: FlaskClient,
                                                                               ns: dict[str, str]) -> None:
    call = {"id": "call_7", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
    lost = {"id": "call_8", "type": "function", "function": {"name": "stock", "arguments": "{}"}}
    turns = [
        [{"role": "user", "content": "what is the weather"},
         {"role": "tool", "tool_call_id": "call_nowhere", "content": "sunny"},  # recorded without its call
         {"role": "assistant", "content": "it is sunny"}],
        [{"role": "user", "content": "and the stock price"},
         {"role": "assistant", "content": "checking", "tool_calls": [call, lost]},
         {"role": "tool", "tool_call_id": "call_7", "content": "rainy"},  # call_8 is never answered
         {"role": "assistant", "content": "rainy, and no price"}],
        [{"role": "user", "content": "only a call"},
         {"role": "assistant", "content": None, "tool_calls": [{**lost, "id": "call_9"}]}],
    ]
    for messages in turns:  # accepted: a session may hold them, assemble must never serve them
        assert record(client, ns, messages).status_code == 200
    for mode in ("snapshot", "focused", "streaming"):
        body = assemble(client, ns, "what about the weather?", mode=mode)
        assert_valid_chat(body["messages"])
        reasons = [d["reason"] for d in body["dropped"]]
        assert reasons.count("tool message without its call") == 1
        assert reasons.count("tool call without its result") == 2
        contents = [m["content"] for m in body["messages"]]
        assert "sunny" not in contents and "rainy" in contents and "checking" in contents
    assert 'acn_assemble_repairs_total{what="orphan_tool_message"}' in client.get("/metrics").get_data(as_text=True)


def test_rolled_back_turns_are_not_served_after_their_numbers_are_reused(client: FlaskClient,
                                                                        ns: dict[str, str]) -> None:
    said = {2: "我们决定把超时时间设为30秒", 5: "the gateway port is 48213. 决定：超时改成45秒"}
    for turn in range(1, 6):
        value = said.get(turn, f"step {turn} is about the parking lot")
        assert record(client, ns, [{"role": "user", "content": value}, {"role": "assistant", "content": "ok"}],
                      compact=False).status_code == 200
    versions = post(client, "session_versions", ns).get_json()["versions"]
    after_turn_3 = next(v["version"] for v in versions if v["turn"] == 3)
    assert post(client, "session_rollback", {**ns, "version": after_turn_3}).status_code == 200
    for turn in (4, 5):
        value = "the gateway port is 51777" if turn == 5 else "step 4 again"
        response = record(client, ns, [{"role": "user", "content": value}, {"role": "assistant", "content": "ok"}],
                          compact=False)
        assert response.get_json()["turn"] == turn
    for mode in ("focused", "snapshot"):
        body = assemble(client, ns, "what is the gateway port?", mode=mode, messages=[], max_tokens=8000)
        assert "48213" not in body["prompt"]
    assert "51777" in body["prompt"] or mode == "snapshot"
    focused = assemble(client, ns, "what is the gateway port?", mode="focused", messages=[], max_tokens=8000)
    assert "51777" in focused["memory_text"] and "48213" not in focused["prompt"]
    # The decision the undone turn 5 changed stands as it was at turn 3.
    decided = post(client, "memory_retrieve", {**ns, "key": "超时"}).get_json()["memories"]
    assert [m["content"] for m in decided] == ["我们决定把超时时间设为30秒"]
    timeout = assemble(client, ns, "超时是多少？", mode="snapshot", messages=[], max_tokens=8000)
    assert "30秒" in timeout["prompt"] and "45秒" not in timeout["prompt"]
    # Kept in the store, marked (nothing stored is lost).
    listed = post(client, "memory_retrieve", {**ns, "query": "gateway port 48213", "kinds": ["turn"],
                                              "include_superseded": True}).get_json()
    assert any("48213" in m["content"] and m["meta"].get("rolled_back") for m in listed["memories"])


# -- what a request names never picks the embedder, its model files or a URL -------------------------------------

_HOSTILE = {"embedder": "use+e5", "cache_dir": "/etc", "model_path": "/etc/passwd",
            "embedding_url": "http://169.254.169.254/latest/meta-data/", "rerank_url": "http://127.0.0.1:1/"}
_BODIES: dict[str, dict[str, Any]] = {
    "memory_write": {"items": [{"kind": "fact", "content": "门牌号 A-1207"}]},
    "record_turn": {"messages": [{"role": "user", "content": "门牌号 A-1207"}]},
    "memory_retrieve": {"query": "门牌号"},
    "assemble": {"user_input": "门牌号是多少？"},
}


@pytest.mark.parametrize("node", sorted(_BODIES))
@pytest.mark.parametrize("field", sorted(_HOSTILE))
def test_a_request_cannot_name_an_embedder_model_folder_or_url(app: Flask, client: FlaskClient, ns: dict[str, str],
                                                                node: str, field: str) -> None:
    """The embedder (use, e5, use+e5, openai), its model cache folder and every outbound URL come from the
    operator's settings only: a request that names one is refused (422, nothing stored) and the server's embedder
    is the one it started with."""
    runtime = app.extensions["acn"]
    deps = runtime.deps(TENANT)
    before = (deps.memories.embedder, deps.reranker, deps.settings.cache_dir)
    body = assert_error(post(client, node, {**ns, **_BODIES[node], field: _HOSTILE[field]}), 422)
    assert field in str(body)
    after = runtime.deps(TENANT)
    assert (after.memories.embedder, after.reranker, after.settings.cache_dir) == before
    listed = post(client, "memory_retrieve", {**ns, "query": "门牌号 A-1207"})
    assert listed.status_code == 200 and listed.get_json()["memories"] == []


_CONTEXT = {"app_id": "app-1", "subject_kind": "user", "subject_id": "u-1"}
_DIFY_BODIES: dict[str, dict[str, Any]] = {
    "memory_prepare": {"memory_context": _CONTEXT, "request": {"query": "门牌号", "max_bytes": 512}},
    "memory_observe": {"memory_context": _CONTEXT,
                       "request": {"event_id": "e-1", "event": "user_prompt", "sequence": 0,
                                   "payload": {"text": "门牌号 A-1207"}, "metadata": {"run_id": "r-1"},
                                   "max_bytes": 8192}},
}


@pytest.mark.parametrize("field", sorted(_HOSTILE))
def test_the_caller_engine_names_no_endpoint(app: Flask, client: FlaskClient, ns: dict[str, str], field: str) -> None:
    """Compaction answered by the caller's own model takes replies, never a URL, folder or embedder: a body that
    names one is refused (422 naming it) and the server's providers are unchanged."""
    runtime = app.extensions["acn"]
    before = (runtime.deps(TENANT).memories.embedder, runtime.deps(TENANT).reranker)
    body = {**ns, "engine": "caller", "messages": [{"role": "user", "content": "门牌号 A-1207"}]}
    refused = assert_error(post(client, "compact", {**body, field: _HOSTILE[field]}), 422)
    assert field in str(refused["errors"])
    assert (runtime.deps(TENANT).memories.embedder, runtime.deps(TENANT).reranker) == before
    assert post(client, "compact", body).status_code == 200  # refused for that field alone


@pytest.mark.parametrize("node", sorted(_DIFY_BODIES))
@pytest.mark.parametrize("field", sorted(_HOSTILE))
def test_dify_external_memory_calls_ignore_whatever_endpoint_they_name(app: Flask, client: FlaskClient,
                                                                       node: str, field: str) -> None:
    """Dify's external-memory contract may grow fields, so the pair ignores unknown ones instead of refusing the
    call (Dify would lose the run's memory): a URL, folder or embedder named at the top level or inside `request`
    changes nothing the server uses, and the answer is the one the plain body gets."""
    runtime = app.extensions["acn"]
    before = (runtime.deps(TENANT).memories.embedder, runtime.deps(TENANT).reranker,
              runtime.deps(TENANT).settings.cache_dir)
    base = _DIFY_BODIES[node]
    for body in ({**base, field: _HOSTILE[field]}, {**base, "request": {**base["request"], field: _HOSTILE[field]}}):
        answer = post(client, node, body)
        assert answer.status_code == 200
        assert answer.get_json()["status"] in {"ready", "empty", "accepted"}
    assert (runtime.deps(TENANT).memories.embedder, runtime.deps(TENANT).reranker,
            runtime.deps(TENANT).settings.cache_dir) == before
