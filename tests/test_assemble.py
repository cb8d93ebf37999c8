"""Assemble: the budget is a hard limit, identity and input are never dropped, layers in order."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acn.text.tokens import load_tokenizer
from tests.conftest import assert_error, post

TOKENIZER = load_tokenizer()
HISTORY = [
    {"role": "user", "content": "我想把对账流程自动化，数据在CSV里，大约12万行。", "turn": 1},
    {"role": "assistant", "content": "好的，我们用Python和pandas来做。", "turn": 1},
    {"role": "user", "content": "查一下订单ORD-77的状态", "turn": 2},
    {"role": "assistant", "content": "", "turn": 2, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "get_order", "arguments": "{\"id\": \"ORD-77\"}"}}]},
    {"role": "tool", "content": "{\"order_id\": \"ORD-77\", \"status\": \"shipped\"}", "tool_call_id": "c1", "turn": 2},
    {"role": "assistant", "content": "订单ORD-77已发货。", "turn": 2},
    {"role": "user", "content": "空值用中位数填充，因为数据偏态。", "turn": 3},
    {"role": "assistant", "content": "已改为中位数填充。", "turn": 3},
]


def assemble(client: FlaskClient, body: dict[str, Any]) -> Any:
    return post(client, "assemble", body)


def test_layers_in_order_with_tags_and_sources(client: FlaskClient, ns: dict[str, str]) -> None:
    post(client, "memory_write", {**ns, "items": [{"kind": "preference", "content": "喜欢简洁的回答", "turn": 1}]})
    body = assemble(client, {**ns, "system_prompt": "你是数据助手。", "user_input": "之前说过我喜欢什么样的回答？",
                             "messages": HISTORY, "working_summary": "[摘要 第1-3轮] 目标: 对账自动化",
                             "knowledge": ["pandas 的 median() 忽略空值"], "max_tokens": 1000}).get_json()
    roles = [m["role"] for m in body["messages"]]
    assert roles[:3] == ["system", "system", "system"] and roles[-1] == "user"
    assert body["messages"][0]["content"] == "你是数据助手。"
    assert body["memory_text"].startswith("[来自记忆 · 偏好 · 第1轮] 喜欢简洁的回答")
    assert "[知识] pandas 的 median() 忽略空值" in body["memory_text"]
    assert body["working_text"] == "[摘要 第1-3轮] 目标: 对账自动化"
    assert body["system_text"].startswith("你是数据助手。\n\n[来自记忆")
    assert body["prompt"].endswith("user: 之前说过我喜欢什么样的回答？")
    assert body["tokens"]["by_layer"]["history"] > 0
    assert {s["layer"] for s in body["sources"]} == {"memory", "working", "history"}


def test_identity_and_input_that_do_not_fit_are_422(client: FlaskClient, ns: dict[str, str]) -> None:
    body = assert_error(assemble(client, {**ns, "system_prompt": "规则。" * 200, "user_input": "你好",
                                          "max_tokens": 100}), 422, "validation_error")
    assert "max_tokens" in body["error"]


def test_tool_call_pairs_stay_whole(client: FlaskClient, ns: dict[str, str]) -> None:
    for budget in range(60, 400, 10):
        body = assemble(client, {**ns, "messages": HISTORY, "working_summary": "", "user_input": "继续",
                                 "max_tokens": budget, "mode": "streaming"}).get_json()
        messages = body["messages"]
        call_ids = {c["id"] for m in messages for c in (m.get("tool_calls") or [])}
        result_ids = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
        assert call_ids == result_ids, budget


def test_unused_budget_flows_to_history(client: FlaskClient, ns: dict[str, str]) -> None:
    long_history = [{"role": role, "content": f"第{turn}轮的{role}消息，内容是关于对账流程的第{turn}个细节。", "turn": turn}
                    for turn in range(1, 30) for role in ("user", "assistant")]
    body = assemble(client, {**ns, "messages": long_history, "working_summary": "", "memories": [],
                             "user_input": "继续", "max_tokens": 400}).get_json()
    history_share = 0.50 / (0.50 + 0.25 + 0.10) * (400 - 10)  # what history gets before anything flows
    assert body["tokens"]["by_layer"]["history"] > history_share
    assert 400 - body["tokens"]["total"] < 60  # nearly all of the budget is used
    assert body["dropped"] and all(d["layer"] == "history" for d in body["dropped"])


def test_phase_presets_shift_budget(client: FlaskClient, ns: dict[str, str]) -> None:
    lines = [f"第{i}条记忆：参数 K{i} 取值 {i * 3}" for i in range(40)]
    history = [{"role": role, "content": f"第{turn}轮的{role}消息，内容是关于对账流程的第{turn}个细节。", "turn": turn}
               for turn in range(1, 30) for role in ("user", "assistant")]
    common = {**ns, "messages": history, "working_summary": "", "memories": lines, "user_input": "继续",
              "max_tokens": 600}
    closing = assemble(client, {**common, "phase": "closing"}).get_json()
    execution = assemble(client, {**common, "phase": "execution"}).get_json()
    assert closing["tokens"]["by_layer"]["memory"] > execution["tokens"]["by_layer"]["memory"]
    assert closing["tokens"]["by_layer"]["history"] < execution["tokens"]["by_layer"]["history"]
    assert any(d["layer"] == "memory" for d in execution["dropped"])


def test_auto_mode_picks_snapshot_for_planning_inputs(client: FlaskClient, ns: dict[str, str]) -> None:
    plan = assemble(client, {**ns, "user_input": "总结一下目前的进度和下一步计划"}).get_json()
    ask = assemble(client, {**ns, "user_input": "订单ORD-77发货了吗"}).get_json()
    assert plan["mode"] == "snapshot" and ask["mode"] == "focused"


@pytest.fixture(scope="module")
def seeded_session(app: Flask) -> dict[str, str]:
    client = app.test_client()
    ns = {"agent_id": "budget-sweep", "session_id": "s1"}
    for turn in range(1, 25):
        messages = [{"role": "user", "content": f"第{turn}轮：把参数P{turn}设为{turn * 7}秒，订单号ORD-{turn:05d}"},
                    {"role": "assistant", "content": f"已将P{turn}设为{turn * 7}秒。" + "说明文字。" * (turn % 5)}]
        assert post(client, "record_turn", {**ns, "messages": messages,
                                             "compaction": {"context_window": 1500}}).status_code == 200
    return ns


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(max_tokens=st.integers(min_value=40, max_value=3000),
       mode=st.sampled_from(["snapshot", "focused", "streaming", "auto"]),
       user_input=st.text(min_size=0, max_size=60),
       system_prompt=st.sampled_from(["", "你是助手。", "You are a careful assistant. " * 5]),
       phase=st.sampled_from([None, "requirement", "execution", "closing"]))
def test_budget_is_never_exceeded(app: Flask, seeded_session: dict[str, str], max_tokens: int, mode: str,
                                  user_input: str, system_prompt: str, phase: str | None) -> None:
    body: dict[str, Any] = {**seeded_session, "max_tokens": max_tokens, "mode": mode, "user_input": user_input,
                            "system_prompt": system_prompt}
    if phase:
        body["phase"] = phase
    response = assemble(app.test_client(), body)
    fixed = sum(TOKENIZER.count_message({"content": text}) for text in (system_prompt, user_input) if text)
    if fixed > max_tokens:
        assert response.status_code == 422
        return
    assert response.status_code == 200, response.get_data(as_text=True)
    result = response.get_json()
    total = sum(TOKENIZER.count_message(m) for m in result["messages"])
    assert total == result["tokens"]["total"] <= max_tokens
    assert TOKENIZER.count(result["prompt"]) <= max_tokens
    if user_input:
        assert result["messages"][-1] == {**result["messages"][-1], "role": "user", "content": user_input}
    if system_prompt:
        assert result["messages"][0]["content"] == system_prompt


def test_readme_example_focused_context_keeps_identity_and_decisions(client: FlaskClient, ns: dict[str, str]) -> None:
    """Issue 17 §3: the README's Chinese example. "我要转账到哪个账户？" shares no word with the identity memory or
    the timeout decision, yet both are standing state and belong in the focused context, beside the account."""
    post(client, "memory_write", {**ns, "items": [
        {"kind": "identity", "content": "我是VIP客户，已开通自动退款", "turn": 10},
        {"kind": "decision", "content": "对账接口超时设为45秒", "key": "超时", "turn": 35}]})
    post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "6月30日前把12万转到对公账户62938471"},
                                                    {"role": "assistant", "content": "好的，已记录。"}]})
    body = assemble(client, {**ns, "max_tokens": 2000, "system_prompt": "你是电商客服助手。",
                             "user_input": "我要转账到哪个账户？"}).get_json()
    assert body["mode"] == "focused"
    assert "我是VIP客户，已开通自动退款" in body["memory_text"]
    assert "对账接口超时设为45秒" in body["memory_text"]
    assert "62938471" in body["prompt"]
    assert body["tokens"]["total"] <= 2000
