"""EditContext: rule-based edits that never lose content, system prompts or tool pairs."""

from __future__ import annotations

import json
from typing import Any

import pydantic
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acn.common.conversation import protected_start
from acn.common.models import Message
from acn.common.settings import Settings
from acn.editing.edit import shrink_json, tool_names
from acn.nodes.edit_context import NODE, EditContextRequest, EditContextResponse, run
from acn.services.deps import Deps
from acn.text.tokens import load_tokenizer

DEPS = Deps(settings=Settings(), tokenizer=load_tokenizer())
ORDERS_JSON = json.dumps(
    {
        "orders": [
            {
                "order_id": f"ORD-20250317-{8800 + i}",
                "status": "shipped",
                "amount": 239 + i,
                "created_at": "2025-03-17",
                "description": "一件很长的商品描述，包含很多营销文字。" * 8,
            }
            for i in range(25)
        ],
        "total": 25,
        "message": "ok",
        "debug_trace": "x" * 800,
    },
    ensure_ascii=False,
)


def _edit(messages: list[dict[str, Any]], **fields: Any) -> EditContextResponse:
    return run(EditContextRequest(messages=messages, **fields), DEPS)


def _call(call_id: str, name: str) -> dict[str, Any]:
    function = {"name": name, "arguments": "{}"}
    return {"role": "assistant", "content": "", "tool_calls": [{"id": call_id, "type": "function", "function": function}]}


def _tool(call_id: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _contents(response: EditContextResponse) -> list[str]:
    return [message.content for message in response.messages]


def _twenty_messages() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "你是订单客服助手。"},
        {"role": "user", "content": "你好"},
        {"role": "assistant", "content": "您好！很高兴为您服务"},
        {"role": "user", "content": "请帮我查询一下我的订单状态，谢谢"},
        _call("call_1", "search_orders"),
        _tool("call_1", ORDERS_JSON),
        {"role": "assistant", "content": "您有25个订单，最近一单ORD-20250317-8824已发货。"},
        {"role": "user", "content": "好的，超时改成30秒"},
        {"role": "assistant", "content": "好的"},
        {"role": "user", "content": "谢谢"},
        {"role": "assistant", "content": "不客气"},
        {"role": "user", "content": "请帮我查询一下我的订单状态谢谢啦"},
        _call("call_2", "get_weather"),
        _tool("call_2", '{"city": "上海", "temp": 21, "status": "ok"}'),
        {"role": "assistant", "content": "上海今天21度。"},
        {"role": "user", "content": "我要在2026年6月30日之前把12万转到对公账户62938471"},
        {"role": "assistant", "content": "明白，已记录截止日期2026年6月30日。"},
        {"role": "user", "content": "嗯"},
        {"role": "assistant", "content": "收到"},
        {"role": "user", "content": "好的"},
    ]


def test_pleasantry_with_content_is_kept() -> None:
    messages = [
        {"role": "user", "content": "好的"},
        {"role": "user", "content": "好的，超时改成30秒"},
        {"role": "user", "content": "继续"},
    ]
    response = _edit(messages, protect_last=0)
    assert _contents(response) == ["好的，超时改成30秒", "继续"]
    assert [(edit.index, edit.action) for edit in response.edits] == [(0, "drop_pleasantry")]


def test_twenty_messages_keep_tool_pairs_and_content() -> None:
    messages = _twenty_messages()
    response = _edit(messages, rules={"clear_tool_results": {"keep": 1}})
    contents = _contents(response)
    assert len(messages) == 20
    assert contents[0] == "你是订单客服助手。"
    assert "好的，超时改成30秒" in contents
    assert "我要在2026年6月30日之前把12万转到对公账户62938471" in contents
    kept_calls = {call["id"] for m in response.messages for call in m.tool_calls or []}
    kept_results = [m.tool_call_id for m in response.messages if m.role == "tool"]
    assert kept_calls == {"call_1", "call_2"}
    assert kept_results == ["call_1", "call_2"]
    for result_id in kept_results:
        call_index = next(i for i, m in enumerate(response.messages) if m.tool_calls and m.tool_calls[0]["id"] == result_id)
        result_index = next(i for i, m in enumerate(response.messages) if m.tool_call_id == result_id)
        assert call_index < result_index
    actions = {edit.index: edit.action for edit in response.edits}
    assert actions[1] == actions[2] == actions[8] == "drop_pleasantry"
    assert actions[3] == "dedupe"  # the earlier copy goes, the latest (index 11) stays
    assert actions[5] == "clear_tool_result"
    assert "请帮我查询一下我的订单状态谢谢啦" in contents
    assert response.tokens_after < response.tokens_before


def test_latest_user_message_is_never_dropped() -> None:
    messages = [{"role": "user", "content": "好的"}, {"role": "assistant", "content": "好的"}, {"role": "user", "content": "好的"}]
    response = _edit(messages, protect_last=0)
    assert [(m.role, m.content) for m in response.messages] == [("user", "好的")]
    assert {edit.index for edit in response.edits} == {0, 1}


def test_protect_last_turns_are_untouched() -> None:
    messages = [
        {"role": "user", "content": "谢谢"},
        {"role": "assistant", "content": "不客气"},
        {"role": "user", "content": "谢谢"},
        {"role": "assistant", "content": "不客气"},
        _call("c1", "logs"),
        _tool("c1", "log line\n" * 500),
        {"role": "user", "content": "OK"},
        {"role": "assistant", "content": "ok"},
    ]
    response = _edit(messages, protect_last=2, rules={"redact_pii": True})
    assert {edit.index for edit in response.edits} == {0, 1}
    assert _contents(response)[-5:] == [m["content"] for m in messages[-5:]]
    assert protected_start([Message(**m) for m in messages], 2) == 2
    assert protected_start([Message(**m) for m in messages], 0) == len(messages)
    assert protected_start([Message(**m) for m in messages], 9) == 0


def test_system_messages_are_never_dropped() -> None:
    messages = [
        {"role": "system", "content": "你好"},
        {"role": "system", "content": "你好"},
        {"role": "user", "content": "问题一"},
    ]
    response = _edit(messages, protect_last=0)
    assert [m.role for m in response.messages] == ["system", "system", "user"]


def test_dedupe_keeps_the_latest_and_respects_numbers() -> None:
    messages = [
        {"role": "user", "content": "请查询订单ORD-1001的物流状态"},
        {"role": "user", "content": "请查询订单ORD-1002的物流状态"},
        {"role": "assistant", "content": "请查询订单ORD-1001的物流状态"},
        {"role": "user", "content": "请查询订单 ORD-1001 的物流状态。"},
        {"role": "user", "content": "下一个问题"},
    ]
    response = _edit(messages, protect_last=1)
    assert [(edit.index, edit.action) for edit in response.edits] == [(0, "dedupe")]
    assert "message 3" in response.edits[0].reason
    assert len(response.messages) == 4


def test_dedupe_can_be_switched_off() -> None:
    messages = [{"role": "user", "content": "同一个问题"}, {"role": "user", "content": "同一个问题"}, {"role": "user", "content": "新"}]
    assert len(_edit(messages, protect_last=0, rules={"dedupe": False}).messages) == 3


def test_clear_tool_results_keep_trigger_exclude_and_placeholder() -> None:
    messages = [
        {"role": "user", "content": "查一下"},
        _call("a", "search_orders"),
        _tool("a", ORDERS_JSON),
        _call("b", "read_policy"),
        _tool("b", "退货政策：" + "七天无理由退货。" * 60),
        _call("c", "search_orders"),
        _tool("c", ORDERS_JSON),
        {"role": "tool", "tool_call_id": "zzz", "name": "named_tool", "content": "结果" * 200},
        {"role": "user", "content": "继续"},
    ]
    rule = {"keep": 1, "exclude_tools": ["read_policy"], "placeholder": "[{tool}: {tokens} tokens cleared]"}
    response = _edit(messages, protect_last=1, rules={"clear_tool_results": rule, "max_tool_result_tokens": None})
    cleared = {edit.index: response.messages[edit.index].content for edit in response.edits}
    assert set(cleared) == {2, 6}
    assert cleared[2].startswith("[search_orders: ") and cleared[2].endswith(" tokens cleared]")
    assert response.messages[4].content.startswith("退货政策")  # excluded tool
    assert response.messages[7].content == "结果" * 200  # the newest result is kept
    untouched = _edit(messages, protect_last=1, rules={"clear_tool_results": {"trigger_tokens": 10**6}})
    assert not [edit for edit in untouched.edits if edit.action == "clear_tool_result"]


def test_tool_names_come_from_calls_or_the_message_name() -> None:
    messages = [Message(**_call("a", "search")), Message(**_tool("a", "x")), Message(role="tool", name="n", content="y")]
    assert tool_names(messages) == {1: "search", 2: "n"}


def test_large_json_tool_result_is_shrunk_to_informative_fields() -> None:
    messages = [{"role": "user", "content": "查订单"}, _call("a", "search_orders"), _tool("a", ORDERS_JSON), {"role": "user", "content": "好"}]
    response = _edit(messages, protect_last=1, rules={"max_tool_result_tokens": 120})
    shrunk = response.messages[2].content
    data = json.loads(shrunk)
    assert data["total"] == 25 and data["message"] == "ok"
    assert data["orders"]["_summary"] == "25 items"
    assert data["orders"]["first"] == {
        "order_id": "ORD-20250317-8800",
        "status": "shipped",
        "amount": 239,
        "created_at": "2025-03-17",
    }
    assert "debug_trace" not in data
    assert DEPS.tokenizer.count(shrunk) <= 120
    edit = response.edits[0]
    assert (edit.index, edit.action) == (2, "shrink_tool_result") and edit.tokens_saved > 0


def test_text_tool_result_is_truncated() -> None:
    messages = [{"role": "user", "content": "看日志"}, _tool("x", "日志行 ERROR 500\n" * 300), {"role": "user", "content": "好"}]
    response = _edit(messages, protect_last=1, rules={"max_tool_result_tokens": 50})
    assert DEPS.tokenizer.count(response.messages[1].content) <= 50
    assert response.messages[1].content.startswith("日志行 ERROR 500")


def test_shrink_json_keeps_ids_statuses_and_errors() -> None:
    value = {"userId": "u1", "ticket_no": "T-9", "note": "long prose", "error": {"code": 42, "detail": "x"}, "items": [1, 2]}
    assert shrink_json(value) == {"userId": "u1", "ticket_no": "T-9", "error": {"code": 42, "detail": "x"}, "items": [1, 2]}


def test_redact_pii_in_unprotected_messages() -> None:
    messages = [
        {"role": "user", "content": "我的手机13812341234，邮箱john@example.com"},
        {"role": "user", "content": "卡号6222 0202 0000 1234 567"},
    ]
    response = _edit(messages, protect_last=1, rules={"redact_pii": True})
    assert response.messages[0].content == "我的手机138****1234，邮箱j***@example.com"
    assert response.messages[1].content == messages[1]["content"]
    assert [(edit.index, edit.action) for edit in response.edits] == [(0, "redact_pii")]


def test_redact_pii_masks_meta_tool_arguments_and_name() -> None:
    arguments = json.dumps({"phone": "139.8765.4321", "id": 110105198512316214, "note": "邮箱 li＠example.com"},
                           ensure_ascii=False)
    messages = [
        {"role": "user", "name": "13987654321", "content": "查一下", "meta": {"caller": "li@example.com",
                                                                          "tel": 13987654321, "part": 1}},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": arguments}}]},
        {"role": "tool", "tool_call_id": "call_1", "name": "lookup", "content": "ok"},
        {"role": "user", "content": "谢谢"},
    ]
    response = _edit(messages, protect_last=1, rules={"redact_pii": True, "drop_pleasantries": False,
                                                      "dedupe": False})
    out = json.dumps([m.model_dump() for m in response.messages], ensure_ascii=False)
    for raw in ("13987654321", "8765", "19851231", "li@example.com", "li＠example.com"):
        assert raw not in out
    first, call = response.messages[0], response.messages[1].tool_calls[0]
    assert first.name == "139****4321"
    assert first.meta == {"caller": "l***@example.com", "tel": "139****4321", "part": 1}
    assert call["id"] == "call_1" and call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"]) == {
        "phone": "139****4321", "id": "110105********6214", "note": "邮箱 l***@example.com"}
    assert [(edit.index, edit.action) for edit in response.edits] == [(0, "redact_pii"), (1, "redact_pii")]
    assert "phone" in response.edits[0].reason and "email" in response.edits[0].reason


def test_token_counts_and_json_string_inputs() -> None:
    messages = _twenty_messages()
    response = run(
        EditContextRequest.model_validate({"messages": json.dumps(messages), "rules": '{"dedupe": false}'}), DEPS
    )
    before = sum(DEPS.tokenizer.count_message(Message(**m)) for m in messages)
    assert response.tokens_before == before
    assert response.tokens_after == sum(DEPS.tokenizer.count_message(m) for m in response.messages)
    assert sum(edit.tokens_saved for edit in response.edits) == before - response.tokens_after
    assert all(edit.action != "dedupe" for edit in response.edits)


@pytest.mark.parametrize(
    "fields",
    [
        {"protect_last": -1},
        {"rules": {"near_duplicate_threshold": 1.5}},
        {"rules": {"max_tool_result_tokens": 0}},
        {"rules": {"clear_tool_results": {"keep": -1}}},
        {"rules": {"unknown": True}},
        {"surprise": 1},
        {"messages": "not json"},
    ],
)
def test_nonsense_values_are_rejected(fields: dict[str, Any]) -> None:
    payload = {"messages": [{"role": "user", "content": "hi"}], **fields}
    with pytest.raises(pydantic.ValidationError):
        EditContextRequest.model_validate(payload)


def test_node_spec() -> None:
    assert NODE.name == "edit_context"
    assert NODE.stateful is False
    assert NODE.request_model is EditContextRequest and NODE.response_model is EditContextResponse
    assert NODE.summary == "Edit a message list by rules before it reaches the model"
    for field_info in EditContextRequest.model_fields.values():
        assert field_info.description


CONTENTS = [
    "好的", "谢谢！", "ok thanks", "好的，超时改成30秒", "请帮我查询订单ORD-1的状态", "请帮我查询订单ORD-2的状态",
    "我的手机13812341234", "Please check my order status", "please check my order status!", "", "继续",
    "我要在2026年6月30日之前把12万转到对公账户62938471",
]
TOOL_CONTENTS = [ORDERS_JSON, "日志 " * 300, '{"status": "ok", "id": 7}', "短结果", "[1, 2, 3, 4, 5, 6]"]


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Draw a chat with an optional system prompt, user/assistant text and tool call/result pairs."""
    messages: list[dict[str, Any]] = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": draw(st.sampled_from(["你是助手。", "你好"]))})
    for block in range(draw(st.integers(min_value=0, max_value=14))):
        kind = draw(st.sampled_from(["user", "assistant", "tool"]))
        if kind == "tool":
            call_id = f"call_{block}"
            messages.append(_call(call_id, draw(st.sampled_from(["search", "logs", "policy"]))))
            for _ in range(draw(st.integers(min_value=1, max_value=2))):
                messages.append(_tool(call_id, draw(st.sampled_from(TOOL_CONTENTS))))
        else:
            messages.append({"role": kind, "content": draw(st.sampled_from(CONTENTS))})
    return messages


RULES = st.fixed_dictionaries(
    {
        "drop_pleasantries": st.booleans(),
        "dedupe": st.booleans(),
        "near_duplicate_threshold": st.floats(min_value=0.5, max_value=1.0),
        "clear_tool_results": st.none()
        | st.fixed_dictionaries(
            {
                "keep": st.integers(min_value=0, max_value=3),
                "trigger_tokens": st.integers(min_value=0, max_value=3000),
                "exclude_tools": st.lists(st.sampled_from(["search", "logs", "policy"]), max_size=2),
            }
        ),
        "max_tool_result_tokens": st.none() | st.integers(min_value=16, max_value=500),
        "redact_pii": st.booleans(),
    }
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations(), RULES, st.integers(min_value=0, max_value=3))
def test_edit_context_invariants(messages: list[dict[str, Any]], rules: dict[str, Any], protect_last: int) -> None:
    response = _edit(messages, rules=rules, protect_last=protect_last)
    assert response.tokens_after <= response.tokens_before
    assert sum(edit.tokens_saved for edit in response.edits) == response.tokens_before - response.tokens_after
    assert [m.content for m in response.messages if m.role == "system"] == [
        m["content"] for m in messages if m["role"] == "system"
    ]
    seen_calls: set[str] = set()
    for message in response.messages:
        seen_calls |= {call["id"] for call in message.tool_calls or []}
        if message.role == "tool":
            assert message.tool_call_id in seen_calls
    assert [m.role for m in response.messages].count("tool") == [m["role"] for m in messages].count("tool")
    users = [m for m in messages if m["role"] == "user"]
    if users and not rules["redact_pii"]:
        assert [m.content for m in response.messages if m.role == "user"][-1] == users[-1]["content"]
