"""A Lite process lists its session heads and memory heads at start (issue 33): a brand-new session's first call
then reads nothing from the store, and a session the list holds is read as before.

On a Lite file this process is the only writer, so "no head listed" means "no head": a new chat's first assemble
made two primary-key reads (its session head, its memory heads), ~4 ms each at a million rows, 3.3x a warm call.
Each test restarts the app on a real Lite file, so what is known comes from the listing, not from the writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from flask import Flask

from acn.common.auth import DEFAULT_TENANT
from acn.common.conversation import SessionState
from acn.common.models import Namespace
from acn.server import create_app
from acn.storage.repositories.listed_ids import ListedIds
from tests.conftest import make_settings, post
from tests.test_assemble_cost import opened
from tests.test_new_session_cost import Counted

OLD = {"agent_id": "old-agent", "session_id": "old-chat"}
TURN = [{"role": "user", "content": "我的订单ORD-000123发到杭州西湖区"},
        {"role": "assistant", "content": "好的，订单ORD-000123发往杭州西湖区。"}]


def seeded(path: Path) -> None:
    app = create_app(make_settings(path))
    try:
        client = app.test_client()
        assert post(client, "record_turn", {**OLD, "messages": TURN}).status_code == 200
        written = post(client, "memory_write", {**OLD, "items": [
            {"kind": "preference", "content": "客户喜欢顺丰快递", "scope": "agent"},
            {"kind": "fact", "content": "客户的会员等级是金卡"}]})
        assert written.status_code == 200, written.get_json()
    finally:
        app.extensions["acn"].close()


@contextmanager
def restarted(tmp_path: Path) -> Iterator[Flask]:
    """Seed the store, close, open again and wait for both start-up lists: what is known comes from them."""
    seeded(tmp_path)
    app = opened(tmp_path)
    try:
        runtime = app.extensions["acn"]
        assert runtime.sessions.present.listed.wait(30) and runtime.memories.heads.present.listed.wait(30)
        yield app
    finally:
        app.extensions["acn"].close()


def reads(counted: Counted) -> list[tuple[str, str, int, bool]]:
    return [call for call in counted.calls if call[0] in ("query", "search_text", "search_dense")]


def called(app: Flask, node: str, body: dict[str, Any]) -> dict[str, Any]:
    response = post(app.test_client(), node, body)
    assert response.status_code == 200, response.get_json()
    result: dict[str, Any] = response.get_json()
    return result


def test_a_new_sessions_first_calls_after_a_restart_read_nothing_from_the_store(tmp_path: Path) -> None:
    with restarted(tmp_path) as app:
        counted = Counted(app.extensions["acn"].store)
        new = {"agent_id": "new-agent", "session_id": "new-chat"}
        answer = called(app, "assemble", {**new, "mode": "focused", "user_input": "订单到哪了", "max_tokens": 1000})
        assert answer["sources"] == [] and reads(counted) == []  # before: 2 primary-key reads
        assert called(app, "record_turn", {**new, "messages": TURN})["turn"] == 1
        written = called(app, "memory_write", {**new, "items": [{"content": "客户住在杭州"}]})
        assert [result["action"] for result in written["results"]] == ["added"]
        assert reads(counted) == []  # before: record_turn read the session head


def test_sessions_the_list_holds_are_read_as_before(tmp_path: Path) -> None:
    with restarted(tmp_path) as app:
        # The old session's head: its next turn is turn 2, and its own memories are found.
        assert called(app, "record_turn", {**OLD, "messages": TURN})["turn"] == 2
        found = called(app, "memory_retrieve", {**OLD, "query": "会员等级"})
        assert [memory["content"] for memory in found["memories"]][:1] == ["客户的会员等级是金卡"]
        # The agent's head: a new session of the same agent reads the agent-scope memory written before.
        found = called(app, "memory_retrieve", {"agent_id": "old-agent", "session_id": "next-chat", "query": "快递"})
        assert [memory["content"] for memory in found["memories"]] == ["客户喜欢顺丰快递"]


def test_an_archiving_mark_left_before_a_sessions_first_commit_is_still_found_after_a_restart(tmp_path: Path) -> None:
    # A request killed between begin_archive and its commit, in a session's very first turn: no head row exists,
    # only the mark. The list holds marks too, so the session is not taken for one known to be clear.
    app = create_app(make_settings(tmp_path))
    namespace = Namespace(agent_id="killed-agent", session_id="killed-chat")
    try:
        app.extensions["acn"].sessions.begin_archive(DEFAULT_TENANT, namespace, SessionState())
    finally:
        app.extensions["acn"].close()
    app = opened(tmp_path)
    try:
        sessions = app.extensions["acn"].sessions
        assert sessions.present.listed.wait(30)
        assert sessions.head_version(DEFAULT_TENANT, namespace) == 0
        assert sessions.archiving_left(DEFAULT_TENANT, namespace) is True
        assert sessions.archiving_marks(DEFAULT_TENANT, [("killed-agent", "killed-chat")]) == {
            ("killed-agent", "killed-chat"): 0}
        # And a session that never began one is clear without a read.
        counted = Counted(app.extensions["acn"].store)
        assert sessions.archiving_left(DEFAULT_TENANT, Namespace(agent_id="a", session_id="b")) is False
        assert reads(counted) == []
    finally:
        app.extensions["acn"].close()


def test_readyz_waits_for_the_lists(tmp_path: Path) -> None:
    with restarted(tmp_path) as app:
        ready = app.test_client().get("/readyz")
        assert ready.status_code == 200 and ready.get_json()["pending"] == []


def test_a_list_over_its_bound_or_one_that_failed_is_not_trusted() -> None:
    bounded = ListedIds(enabled=True, what="heads", limit=2)
    bounded.load(lambda: [{"id": "a"}, {"id": "b"}, {"id": "c"}])
    assert not bounded.absent("z")  # dropped: absence is read by key
    failed = ListedIds(enabled=True, what="heads")

    def broken() -> list[dict[str, Any]]:
        raise RuntimeError("store closed")

    failed.load(broken)
    assert not failed.absent("z")
    whole = ListedIds(enabled=True, what="heads", limit=2)
    whole.add(["written"])  # a write before the list is read is kept
    whole.load(lambda: [{"id": "a"}])
    assert (whole.absent("z"), whole.absent("a"), whole.absent("written")) == (True, False, False)
    assert not ListedIds(enabled=False, what="heads").absent("z")  # a server: nothing is listed
