"""Rule-based event extraction for memory writes, in Chinese and English."""

from __future__ import annotations

import pytest

from acn.text.events import Event, extract_events, topic_key


def _one(text: str, role: str = "user") -> Event:
    events = extract_events(text, role=role)
    assert len(events) == 1, events
    return events[0]


def test_timeout_change_keeps_the_same_key() -> None:
    first = _one("超时时间设为30秒")
    later = _one("好的，超时改成45秒")
    assert (first.kind, later.kind) == ("decision", "decision")
    assert first.key == later.key == "超时"
    assert later.content == "超时改成45秒"  # the acknowledgement is stripped, the number kept


def test_english_timeout_change_joins_the_same_topic() -> None:
    assert _one("Set the timeout to 45 seconds.").key == "超时"


def test_recommendation_constraint() -> None:
    event = _one("不要给我推荐新品")
    assert (event.kind, event.key) == ("constraint", "recommendation")


def test_seed_sentence_is_a_fact_with_every_number() -> None:
    text = "我要在2026年6月30日之前把12万转到对公账户62938471"
    event = _one(text)
    assert event.kind == "fact"
    for value in ("2026年6月30日", "12万", "62938471"):
        assert value in event.content


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("我是产品经理，负责支付模块。", "identity"),
        ("我叫张三", "identity"),
        ("My name is Alice.", "identity"),
        ("I am a backend engineer", "identity"),
        ("我更喜欢简洁的回答", "preference"),
        ("I prefer short answers.", "preference"),
        ("回复必须用中文", "constraint"),
        ("Never share my email.", "constraint"),
        ("我们决定采用PostgreSQL", "decision"),
        ("Let's use Milvus for storage.", "decision"),
        ("记得明天提交报告", "todo"),
        ("Remember to rotate the keys.", "todo"),
        ("订单号ORD-20250317-8821", "fact"),
    ],
)
def test_kinds(text: str, kind: str) -> None:
    assert _one(text).kind == kind


@pytest.mark.parametrize(
    "text",
    ["好的，谢谢！", "今天天气不错", "你能做什么？", "I'm a bit confused", "ok thanks", "哈哈哈"],
)
def test_chit_chat_pleasantries_and_empty_questions_are_not_events(text: str) -> None:
    assert extract_events(text) == []


def test_question_with_an_order_number_is_a_fact() -> None:
    assert _one("能帮我查一下订单ORD-123-4吗？").kind == "fact"


def test_assistant_confirmation_with_a_number_is_a_decision() -> None:
    event = _one("已为您将超时设置为45秒", role="assistant")
    assert (event.kind, event.key) == ("decision", "超时")


@pytest.mark.parametrize(
    "text", ["好的，我明白了。", "您的需求是什么？", "建议您考虑一下预算。", "我来帮您看看。"]
)
def test_assistant_is_conservative(text: str) -> None:
    assert extract_events(text, role="assistant") == []


def test_system_and_tool_roles_give_nothing() -> None:
    assert extract_events("超时时间设为30秒", role="system") == []
    assert extract_events('{"timeout": 30}', role="tool") == []


def test_several_sentences_give_several_events() -> None:
    events = extract_events("My name is Alice. I prefer short answers. Never share my email.")
    assert [event.kind for event in events] == ["identity", "preference", "constraint"]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("把数据库的连接池大小改成20", "连接池大小"),
        ("把数据库的连接超时时间改成45秒", "超时"),
        ("We decided to use top_k=5", "top_k"),
        ("预算不能超过5000元", "预算"),
        ("重试次数改为3次", "重试"),
    ],
)
def test_keys(text: str, key: str) -> None:
    assert _one(text).key == key


def test_facts_and_todos_have_no_key() -> None:
    assert topic_key("订单号ORD-1-2", "fact") is None
    assert _one("记得明天提交报告").key is None
