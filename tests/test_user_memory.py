"""A returning user is remembered (issue 48): what a user states about themselves follows them into their next
conversation of the same agent; what belongs to one conversation stays in it; nobody else sees it."""

from __future__ import annotations

import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from flask import Flask
from flask.testing import FlaskClient

from acn.common.models import Message
from acn.memory.durable import extracted_for
from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.milvus import MilvusStore
from tests.conftest import ROOT, make_settings, post, serving

C1 = ["你好", "我的收货电话改成 13912345678，地址是杭州市西湖区文三路398号", "另外我对花生过敏，推荐零食时别推含花生的",
      "我是老客户，不想要新品推荐", "我的订单 A20250101 还没发货，帮我催一下"]
KEYS = "key-alpha-123-0123456789:alpha,key-beta-456-0123456789:beta"
ALPHA = {"Authorization": "Bearer key-alpha-123-0123456789"}
BETA = {"Authorization": "Bearer key-beta-456-0123456789"}


def user_ns(session: str, user: str = "u-42", agent: str = "kefu") -> dict[str, str]:
    return {"agent_id": agent, "session_id": session, "user_id": user}


def say(client: FlaskClient, ns: dict[str, str], text: str, **extra: Any) -> list[dict[str, Any]]:
    """Record one user turn (and a short reply); return the memories it wrote."""
    response = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": text},
                                                                {"role": "assistant", "content": "好的"}], **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    return list(response.get_json()["memories"])


def memory_text(client: FlaskClient, ns: dict[str, str], user_input: str, max_tokens: int = 300,
                **headers: str) -> str:
    body = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": max_tokens, "user_input": user_input,
                                     "messages": []},
                headers=headers).get_json()
    return str(body["memory_text"])


def scopes(client: FlaskClient, agent: str, **extra: str) -> dict[str, str]:
    listing = client.get("/v1/memories", query_string={"agent_id": agent, "include_superseded": "true",
                                                        **extra}).get_json()
    return {m["content"]: m["scope"] for m in listing["memories"] if m["kind"] != "turn"}


@pytest.fixture()
def kefu() -> str:
    return f"kefu-{uuid.uuid4().hex[:8]}"


def test_the_issue_three_questions_are_answered_in_a_new_conversation(client: FlaskClient, kefu: str) -> None:
    for text in C1:
        say(client, user_ns("c-1", agent=kefu), text)
    assert scopes(client, kefu) == {
        "我的收货电话改成 13912345678": "user", "地址是杭州市西湖区文三路398号": "user",
        "另外我对花生过敏，推荐零食时别推含花生的": "user", "我是老客户，不想要新品推荐": "user",
        "我的订单 A20250101 还没发货，帮我催一下": "session"}
    c2 = user_ns("c-2", agent=kefu)
    assert "13912345678" in memory_text(client, c2, "我的收货电话是多少？")
    assert "花生过敏" in memory_text(client, c2, "给我推荐点零食吧")
    assert "不想要新品推荐" in memory_text(client, c2, "有什么新品推荐吗？")
    # A line from an earlier conversation says the day it was said, not a turn number of another conversation.
    line = next(line for line in memory_text(client, c2, "我的收货电话是多少？").splitlines() if "13912345678" in line)
    assert re.fullmatch(r"\[来自记忆 · 身份 · \d{4}-\d{2}-\d{2}\] 我的收货电话改成 13912345678", line), line
    # This conversation's order stays in c-1.
    assert "A20250101" not in memory_text(client, c2, "我的订单发货了吗？")
    assert "A20250101" in memory_text(client, user_ns("c-1", agent=kefu), "我的订单发货了吗？")


def test_nobody_else_sees_the_users_memories(client: FlaskClient, kefu: str) -> None:
    for text in C1[1:4]:
        say(client, user_ns("c-1", agent=kefu), text)
    for ns in (user_ns("c-2", user="u-7", agent=kefu), {"agent_id": kefu, "session_id": "c-3"},
               user_ns("c-2", agent=f"{kefu}-other")):
        for question in ("我的收货电话是多少？", "给我推荐点零食吧", "有什么新品推荐吗？"):
            assert memory_text(client, ns, question, max_tokens=1000) == ""


def test_a_changed_phone_supersedes_across_conversations_history_kept(client: FlaskClient, kefu: str) -> None:
    say(client, user_ns("c-1", agent=kefu), "我的电话是 13912345678")
    for n in range(2, 5):
        say(client, user_ns(f"c-{n}", agent=kefu), "帮我看看有什么新品")
    written = say(client, user_ns("c-5", agent=kefu), "我的手机号换成 13800001111 了")
    assert [(m["kind"], m["action"], m["version"]) for m in written] == [("identity", "superseded", 2)]
    c6 = user_ns("c-6", agent=kefu)
    text = memory_text(client, c6, "我的电话是多少？")
    assert "13800001111" in text and "13912345678" not in text
    memory = client.get(f"/v1/memories/{written[0]['id']}").get_json()["memory"]
    assert memory["key"] == "phone" and memory["session_id"] == "c-5"
    assert [h["content"] for h in memory["history"]] == ["我的电话是 13912345678"]
    old = client.get(f"/v1/memories/{written[0]['superseded_ids'][0]}").get_json()["memory"]
    assert old["session_id"] == "c-1" and old["superseded_by"] == written[0]["id"] and old["valid_to"]


def test_the_rule_is_a_setting_and_a_per_request_choice(tmp_path: Path, kefu: str) -> None:
    app = create_app(make_settings(tmp_path, user_memory="off"))
    try:
        client = app.test_client()
        say(client, user_ns("c-1", agent=kefu), "我不能吃花生")
        say(client, user_ns("c-1", agent=kefu), "我是老客户", user_memory="profile")
        say(client, user_ns("c-1", agent=kefu), "订单 A123 明天发货", user_memory="all")
        assert scopes(client, kefu) == {"我不能吃花生": "session", "我是老客户": "user",
                                        "订单 A123 明天发货": "user"}
        post(client, "memory_write", {**user_ns("c-2", agent=kefu), "extract": True, "user_memory": "profile",
                                      "messages": [{"role": "user", "content": "我的邮箱是 a@example.com"}]})
        assert scopes(client, kefu)["我的邮箱是 a@example.com"] == "user"
    finally:
        app.extensions["acn"].close()


def test_without_a_user_id_every_extracted_memory_stays_in_its_conversation(client: FlaskClient,
                                                                             kefu: str) -> None:
    for text in C1:
        say(client, {"agent_id": kefu, "session_id": "c-1"}, text)
    assert set(scopes(client, kefu).values()) == {"session"}


@pytest.mark.parametrize(("text", "role", "expected"), [
    ("我叫张三", "user", [("identity", "user", "name")]),
    ("我是老客户，不想要新品推荐", "user", [("identity", "user", None)]),
    ("我喜欢喝无糖的饮料", "user", [("preference", "user", None)]),
    ("以后晚上别给我打电话", "user", [("constraint", "user", None)]),
    ("我对芒果也过敏", "user", [("constraint", "user", None)]),
    ("我住在上海市浦东新区张江路88号", "user", [("identity", "user", "address")]),
    ("我的电话是多少？", "user", []),
    ("把服务器地址改成 10.0.0.1", "user", [("decision", "session", "服务器地址")]),
    ("发票抬头改成杭州某某科技有限公司", "user", [("identity", "user", "invoice_title")]),
    ("代码必须用Python写", "user", [("constraint", "session", "代码")]),
    ("这次的订单必须周五前送到", "user", [("constraint", "session", "订单")]),
    ("超时时间设为30秒", "user", [("decision", "session", "超时")]),
    ("已为您将收货电话改为 13912345678", "assistant", [("decision", "session", "收货电话")]),
    ("记得下周提醒我续费", "user", [("todo", "session", None)]),
    ("My name is Alice and I am allergic to nuts", "user", [("identity", "user", None)]),
    ("Please never call my phone, email me instead", "user", [("constraint", "user", None)]),
    ("I live in Boston", "user", [("identity", "user", "address")]),
    ("I am allergic to peanuts", "user", [("constraint", "user", None)]),
    ("My order #A123 has not arrived", "user", [("fact", "session", None)]),
])
def test_the_durable_rule(text: str, role: str, expected: list[tuple[str, str, str | None]]) -> None:
    items = extracted_for([Message(role=role, content=text, turn=1)], "u-1", "profile")  # type: ignore[arg-type]
    assert [(i.kind, i.scope, i.key) for i in items] == expected


def test_the_inspector_shows_each_memorys_scope(client: FlaskClient, kefu: str) -> None:
    say(client, user_ns("c-1", agent=kefu), "我是老客户")
    say(client, user_ns("c-1", agent=kefu), "我的订单 A1 还没到")
    page = client.get(f"/ui/agents/{kefu}/sessions/c-1").get_data(as_text=True)
    assert "scope-user" in page and "scope-session" in page
    say(client, user_ns("c-2", agent=kefu), "你好")
    later = client.get(f"/ui/agents/{kefu}/sessions/c-2", query_string={"lang": "en"}).get_data(as_text=True)
    assert "memories from their other conversations" in later and "我是老客户" in later and "我的订单 A1" not in later


@pytest.fixture()
def keyed_app(tmp_path: Path) -> Iterator[Flask]:
    app = create_app(make_settings(tmp_path, api_keys=KEYS))
    yield app
    app.extensions["acn"].close()


def test_another_tenant_sees_none_of_it(keyed_app: Flask) -> None:
    client = keyed_app.test_client()
    for text in C1[1:4]:
        post(client, "record_turn", {**user_ns("c-1"), "messages": [{"role": "user", "content": text}]},
             headers=ALPHA)
    assert "13912345678" in memory_text(client, user_ns("c-2"), "我的收货电话是多少？", **ALPHA)
    assert memory_text(client, user_ns("c-2"), "我的收货电话是多少？", max_tokens=1000, **BETA) == ""


def test_a_user_is_forgotten_in_every_conversation_verifiably(client: FlaskClient, kefu: str) -> None:
    other_agent, me = f"{kefu}-shop", f"u-{kefu}"  # a user of this test only: the app's store is shared
    say(client, user_ns("c-1", me, kefu), "我的电话是 13912345678")
    say(client, user_ns("c-2", me, kefu), "我对花生过敏")
    say(client, user_ns("c-3", me, other_agent), "我叫王芳")
    say(client, user_ns("c-9", user="u-7", agent=kefu), "我叫李雷")
    say(client, user_ns("c-both", me, kefu), "我喜欢绿茶")
    say(client, user_ns("c-both", user="u-7", agent=kefu), "我也喜欢红茶")
    response = client.delete("/v1/memories", query_string={"user_id": me})
    body = response.get_json()
    assert response.status_code == 200, body
    assert body["remaining"] == 0 and body["sessions_deleted"] == 3 and body["deleted"] >= 10
    for agent in (kefu, other_agent):
        listing = client.get("/v1/memories", query_string={"agent_id": agent, "user_id": me,
                                                            "include_superseded": "true"}).get_json()
        assert listing["memories"] == []
    for agent, session in ((kefu, "c-1"), (kefu, "c-2"), (other_agent, "c-3")):
        state = post(client, "session_state", {"agent_id": agent, "session_id": session}).get_json()
        assert state["version"] == 0 and state["buffer"] == []
    kept = post(client, "session_state", {"agent_id": kefu, "session_id": "c-both"}).get_json()
    assert kept["version"] > 0  # u-7 wrote there too: the conversation stays, without u-42's rows
    assert memory_text(client, user_ns("c-10", me, kefu), "我的电话是多少？", max_tokens=1000) == ""
    assert "李雷" in memory_text(client, user_ns("c-11", user="u-7", agent=kefu), "我叫什么？")
    refused = client.delete("/v1/memories", query_string={"session_id": "c-1"})
    assert refused.status_code == 422


def test_acn_delete_user_forgets_them_and_says_nothing_remains() -> None:
    with serving() as base:
        for session in ("c-1", "c-2"):
            requests.post(f"{base}/v1/nodes/record_turn", timeout=60, json={
                **user_ns(session), "messages": [{"role": "user", "content": f"我的电话是 1391234567{session[-1]}"}]})

        def acn(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([sys.executable, "-m", "acn.app.cli", "--url", base, *args], cwd=ROOT,
                                  capture_output=True, text=True, timeout=120)

        assert acn("delete", "--user", "u-42").returncode == 1  # asks first: no terminal, no --yes
        forgotten = acn("delete", "--user", "u-42", "--yes")
        assert forgotten.returncode == 0, forgotten.stderr
        assert "deleted: 4, conversations deleted: 2, remaining: 0" in forgotten.stderr  # 2 phones, 2 turns
        assert acn("list", "--agent", "kefu").stdout == ""


def test_a_returning_users_new_conversation_reads_none_of_their_rows_from_the_store(
        fresh_app: Flask, monkeypatch: pytest.MonkeyPatch) -> None:
    client = fresh_app.test_client()
    for n in range(6):
        say(client, user_ns(f"c-{n}"), f"我的电话是 1391234567{n}")
        say(client, user_ns(f"c-{n}"), f"我喜欢第{n}款零食")
    say(client, user_ns("c-other", user="u-7"), "我叫李雷")
    assert "13912345675" in memory_text(client, user_ns("new-1"), "我的电话是多少？")  # the user's index loads
    memories = fresh_app.extensions["acn"].memories
    rows_read: list[int] = []
    query = memories.store.query

    def counted(collection: str, where: Any, **kwargs: Any) -> Any:
        found = query(collection, where, **kwargs)
        if collection == memories.spec.name:
            rows_read.append(len(found))
        return found

    monkeypatch.setattr(memories.store, "query", counted)
    for n in range(2, 5):
        assert "13912345675" in memory_text(client, user_ns(f"new-{n}"), "我的电话是多少？")
    assert sum(rows_read) == 0  # held once for every conversation of the user: nothing read again
    held = memories.cache.indexes
    assert len(held[("default", "kefu", "~user~u-42")]) == 12  # six phones (five closed) and six preferences
    assert all(len(index) == 0 for key, index in held.items() if key[2].startswith("new-"))  # no user's rows


def test_a_store_whose_heads_listed_user_rows_under_their_agent_is_rebuilt_once(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    app = create_app(settings)
    client = app.test_client()
    say(client, user_ns("c-1"), "我的电话是 13912345678")
    runtime = app.extensions["acn"]
    heads = runtime.memories.heads.spec.name
    runtime.close()
    # As the release before per-user pages left a store: its heads and pages (user rows under the agent's) and the
    # `built` marker, no `built-u` one. Simulated by the pass that built them: no head at all, the old marker only.
    reopened = MilvusStore(settings.milvus_uri).open()
    reopened.delete(heads, Filter('kind != ""'))
    reopened.upsert(heads, [{"id": "built", "kind": "built", "tenant": "", "agent_id": "", "session_id": "",
                             "high_ms": 1, "ids": [], "dense": [1.0, 0.0]}])
    reopened.close()
    app = create_app(settings)
    runtime = app.extensions["acn"]
    try:
        if runtime.memories.heads.building is not None:
            runtime.memories.heads.building.join(60)
        assert runtime.warmer is not None and runtime.warmer.done.wait(60)
        assert "13912345678" in memory_text(app.test_client(), user_ns("c-2"), "我的电话是多少？")
        assert runtime.memories.heads.user_member_ids("default", "kefu", "u-42")
    finally:
        runtime.close()


def test_an_input_about_an_earlier_conversation_finds_its_messages_dated(client: FlaskClient, kefu: str) -> None:
    post(client, "record_turn", {**user_ns("c-1", agent=kefu), "messages": [
        {"role": "user", "content": "我要申请退款，订单 A20250101，金额 99 元"},
        {"role": "assistant", "content": "好的，退款申请已提交，3-5 个工作日到账。"}]})
    say(client, user_ns("c-2", agent=kefu), "你好")  # c-2's turn 1: c-1's turn 1 is another conversation's
    body = post(client, "assemble", {**user_ns("c-2", agent=kefu), "mode": "focused", "max_tokens": 1000,
                                     "user_input": "上次说的那个退款怎么样了？"}).get_json()
    lines = body["memory_text"].splitlines()
    assert re.fullmatch(r"\[来自记忆 · \d{4}-\d{2}-\d{2}\]", lines[0]), lines
    assert lines[1:] == ["用户: 我要申请退款，订单 A20250101，金额 99 元", "助手: 好的，退款申请已提交，3-5 个工作日到账。"]
    assert {s["meta"].get("from_conversation") for s in body["sources"] if s["layer"] == "memory"} == {"c-1"}
    # Only when the input asks about an earlier time, and only the user's own conversations.
    assert "A20250101" not in memory_text(client, user_ns("c-2", agent=kefu), "退款怎么样了？", max_tokens=1000)
    assert "A20250101" not in memory_text(client, user_ns("c-3", user="u-7", agent=kefu), "上次说的那个退款怎么样了？",
                                          max_tokens=1000)
