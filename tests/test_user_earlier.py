"""A returning user's earlier conversations in focused recall (issue 48): their archived messages are candidates
of a new conversation, ranked with its own, read in their own conversation, dated; nobody else's ever."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.common.models import Namespace
from acn.server import create_app
from acn.storage.repositories.user_archive import has_earlier
from tests.conftest import make_settings, post

TRIP = [("我下个月去成都出差，住在春熙路附近的酒店", "好的，春熙路交通很方便。"),
        ("对了，我女儿的钢琴老师姓周，每周六上课", "记下了：周老师，每周六的钢琴课。"),
        ("周老师这周六请假了，课挪到周日下午三点", "好的，这周改到周日下午三点。")]


def user_ns(session: str, user: str = "u-42", agent: str = "kefu") -> dict[str, str]:
    return {"agent_id": agent, "session_id": session, "user_id": user}


def record(client: FlaskClient, ns: dict[str, str], exchanges: list[tuple[str, str]], **extra: Any) -> None:
    for said, reply in exchanges:
        response = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": said},
                                                                   {"role": "assistant", "content": reply}]}, **extra)
        assert response.status_code == 200, response.get_data(as_text=True)


def focused(client: FlaskClient, ns: dict[str, str], user_input: str, max_tokens: int = 1000,
            **extra: Any) -> dict[str, Any]:
    response = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": max_tokens, "user_input": user_input,
                                         "messages": []}, **extra)
    assert response.status_code == 200, response.get_data(as_text=True)
    return dict(response.get_json())


@pytest.fixture()
def kefu() -> str:
    return f"kefu-{uuid.uuid4().hex[:8]}"


def test_an_earlier_conversations_message_answers_a_question_in_a_new_one(client: FlaskClient, kefu: str) -> None:
    record(client, user_ns("c-1", agent=kefu), TRIP)
    body = focused(client, user_ns("c-2", agent=kefu), "钢琴课是星期几？")  # no 上次: a question about it is enough
    lines = body["memory_text"].splitlines()
    piano = lines.index("用户: 对了，我女儿的钢琴老师姓周，每周六上课")
    # Headed by the day of its conversation, which sources name (its turn number is c-1's, not c-2's).
    assert [line for line in lines[:piano] if re.fullmatch(r"\[来自记忆 · \d{4}-\d{2}-\d{2}\]", line)], lines
    earlier = [s for s in body["sources"] if s["layer"] == "memory" and s["kind"] == "turn"]
    assert earlier and {s["meta"]["from_conversation"] for s in earlier} == {"c-1"}


def test_its_neighbours_are_read_in_its_own_conversation(client: FlaskClient, kefu: str) -> None:
    record(client, user_ns("c-1", agent=kefu), TRIP)
    record(client, user_ns("c-2", agent=kefu), [("你好", "你好，有什么可以帮你？")] * 2)  # c-2 has turns 1 and 2 too
    body = focused(client, user_ns("c-2", agent=kefu), "周老师的课改到什么时候了？")
    lines = body["memory_text"].splitlines()
    # The reply after the matching message is c-1's turn 3 reply (c-2 has no turn 3), shown right after it.
    at = lines.index("用户: 周老师这周六请假了，课挪到周日下午三点")
    assert lines[at + 1] == "助手: 好的，这周改到周日下午三点。"
    replies = [s for s in body["sources"] if s["meta"].get("role") == "assistant" and s["turn_range"] == [3, 3]]
    assert [s["meta"]["from_conversation"] for s in replies] == ["c-1"]


def test_the_conversations_own_messages_rank_with_the_earlier_ones(client: FlaskClient, kefu: str) -> None:
    record(client, user_ns("c-1", agent=kefu), TRIP)
    record(client, user_ns("c-2", agent=kefu), [("成都出差的酒店我换到了太古里", "好的，已改为太古里。")])
    lines = focused(client, user_ns("c-2", agent=kefu), "我成都出差住哪个酒店？", max_tokens=300)["memory_text"]
    assert "成都出差的酒店我换到了太古里" in lines and "住在春熙路附近的酒店" in lines


def test_nobody_else_finds_the_users_earlier_messages(client: FlaskClient, kefu: str) -> None:
    record(client, user_ns("c-1", agent=kefu), TRIP)
    for ns in (user_ns("c-2", user="u-7", agent=kefu), {"agent_id": kefu, "session_id": "c-3"},
               user_ns("c-2", agent=f"{kefu}-other")):
        assert "钢琴" not in focused(client, ns, "钢琴课是星期几？")["memory_text"], ns


def test_another_tenant_finds_none_of_them(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, api_keys="key-alpha-123-0123456789:alpha,key-beta-456-0123456789:beta"))
    alpha = {"headers": {"Authorization": "Bearer key-alpha-123-0123456789"}}
    beta = {"headers": {"Authorization": "Bearer key-beta-456-0123456789"}}
    try:
        client = app.test_client()
        record(client, user_ns("c-1"), TRIP, **alpha)
        assert "钢琴" in focused(client, user_ns("c-2"), "钢琴课是星期几？", **alpha)["memory_text"]
        assert "钢琴" not in focused(client, user_ns("c-2"), "钢琴课是星期几？", **beta)["memory_text"]
    finally:
        app.extensions["acn"].close()


def test_a_first_conversation_searches_no_archive_of_the_user(fresh_app: Flask) -> None:
    client = fresh_app.test_client()
    memories = fresh_app.extensions["acn"].memories
    first = Namespace(**user_ns("c-1"))
    record(client, user_ns("c-1"), TRIP)
    assert not has_earlier(memories, "default", first)  # every archived message of the user is this conversation's
    focused(client, user_ns("c-1"), "钢琴课是星期几？")
    assert ("default", "kefu", "~turns~u-42") not in memories.cache.indexes  # never loaded
    assert has_earlier(memories, "default", Namespace(**user_ns("c-2")))
    record(client, user_ns("c-2"), TRIP[:1])
    assert has_earlier(memories, "default", first)  # c-2's message is another conversation's for c-1


def test_after_a_restart_the_users_archive_is_held_before_their_first_call(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    app = create_app(settings)
    record(app.test_client(), user_ns("c-1"), TRIP)
    app.extensions["acn"].close()
    app = create_app(settings)
    runtime = app.extensions["acn"]
    try:
        assert runtime.warmer is not None and runtime.warmer.done.wait(60)
        archive = runtime.memories.cache.indexes[("default", "kefu", "~turns~u-42")]
        assert len(archive) == 2 * len(TRIP)
        # Searched as a new conversation searches it: the filter's mask over the user's messages (their whole
        # history) is made by the warmer, and the first call makes none.
        masks = set(archive._masks)
        assert masks
        assert "钢琴" in focused(app.test_client(), user_ns("c-2"), "钢琴课是星期几？")["memory_text"]
        assert set(archive._masks) == masks
    finally:
        runtime.close()
