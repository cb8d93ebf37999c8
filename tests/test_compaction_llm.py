"""The LLM engine against the real loopback fake: verification, fallbacks, time bound, self-check."""

# The fake_llm fixture is imported by name, so every test that takes it "redefines" it.
# ruff: noqa: F811

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from acn.common.errors import ProviderError
from acn.common.models import Segment
from acn.compaction.engine import compact_turns
from acn.compaction.llm import parse_summary
from acn.providers.openai_chat import ChatClient
from acn.text.numbers import value_present
from acn.text.tokens import Tokenizer, load_tokenizer
from tests.compaction_conversations import ZH_FINANCE_TURNS, conversation
from tests.fake_llm import FakeLLM, fake_llm  # noqa: F401

TIMEOUT, RETRIES = 0.5, 1


def good_reply(**changes: Any) -> dict[str, Any]:
    """A faithful LLM summary of ZH_FINANCE_TURNS[:6]."""
    reply = {
        "goal": "查询订单ORD-20250317-8821退款进度，并在2026年6月30日之前把12万转到对公账户62938471",
        "constraints": ["不要给我推荐新品"],
        "done": ["订单ORD-20250317-8821退款已提交，预计3个工作日到账"],
        "todo": [],
        "decisions": [{"decision": "转账接口超时改成45秒", "reason": "银行接口高峰期比较慢"}],
        "facts": [],
        "key_numbers": {
            "订单号": "ORD-20250317-8821",
            "截止日期": "2026年6月30日",
            "金额": "12万",
            "对公账户": "62938471",
            "超时": "45秒",
            "超时（此前）": "30秒",
            "到账时间": "3个工作日",
        },
    }
    reply.update(changes)
    return reply


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


@pytest.fixture
def chat(fake_llm: FakeLLM) -> Iterator[ChatClient]:
    client = ChatClient(fake_llm.base_url, "fake-model", timeout_seconds=TIMEOUT, retries=RETRIES)
    with client:
        yield client


def compact(
    chat: ChatClient,
    tokenizer: Tokenizer,
    turns: int = 6,
    previous: list[Segment] | None = None,
    first_turn: int = 1,
) -> Any:
    messages = conversation(ZH_FINANCE_TURNS[first_turn - 1 : first_turn - 1 + turns], first_turn=first_turn)
    return compact_turns(
        messages,
        previous or [],
        segment_size=6,
        max_segments=5,
        engine="auto",
        chat=chat,
        tokenizer=tokenizer,
    )


def test_llm_summary_is_used_and_prompt_insists_on_numbers(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_json(good_reply())
    outcome = compact(chat, tokenizer)
    assert outcome.engine_used == "llm" and outcome.fallback_reason is None
    [segment] = outcome.segments
    assert segment.decisions[0].decision == "转账接口超时改成45秒"
    assert segment.text.startswith("[摘要 第1-6轮] 目标: 查询订单")
    assert outcome.numbers_restored == 0
    prompt = fake_llm.requests[0]["json"]["messages"][1]["content"]
    assert "必须保留所有数字、日期、账号、金额、ID" in prompt
    assert "第4轮 用户: 转账接口的超时设为30秒。" in prompt


def test_verifier_restores_a_number_the_llm_dropped(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    reply = good_reply(goal="查询订单ORD-20250317-8821退款进度，并在2026年6月30日之前把12万转到对公账户")
    del reply["key_numbers"]["对公账户"]
    fake_llm.reply_json(reply)
    outcome = compact(chat, tokenizer)
    assert outcome.engine_used == "llm"
    assert outcome.numbers_restored == 1
    assert outcome.numbers_preserved == outcome.numbers_in_source - 1
    [segment] = outcome.segments
    assert "62938471" in segment.key_numbers.values()
    assert value_present("62938471", segment.text)


def test_invalid_json_falls_back_to_extractive(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_text("当然！这是摘要：目标是转账")
    outcome = compact(chat, tokenizer)
    assert outcome.engine_used == "extractive"
    assert outcome.fallback_reason is not None and "not valid JSON" in outcome.fallback_reason
    assert value_present("62938471", outcome.segments[0].text)
    assert len(fake_llm.requests) == 1


def test_reply_outside_the_schema_falls_back(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_json({"summary": "用户要转账", "key_numbers": {"amount": 120000}})
    outcome = compact(chat, tokenizer)
    assert outcome.engine_used == "extractive"
    assert "schema" in (outcome.fallback_reason or "") and "goal" in (outcome.fallback_reason or "")


def test_slow_llm_falls_back_within_the_time_bound(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_slow(5.0, good_reply()).reply_slow(5.0, good_reply())
    started = time.monotonic()
    outcome = compact(chat, tokenizer)
    elapsed = time.monotonic() - started
    assert outcome.engine_used == "extractive"
    assert "timed out" in (outcome.fallback_reason or "")
    # A behaviour bound, not a benchmark: never longer than every attempt timing out, plus slack.
    assert elapsed < TIMEOUT * (RETRIES + 1) + 1.5


def test_http_500_is_retried_then_falls_back(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_status(500).reply_status(500).reply_json(good_reply())
    outcome = compact(chat, tokenizer)
    assert len(fake_llm.requests) == RETRIES + 1
    assert outcome.engine_used == "extractive"
    assert "HTTP 500" in (outcome.fallback_reason or "")


def test_http_500_then_success_uses_the_llm(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_status(500).reply_json(good_reply())
    outcome = compact(chat, tokenizer)
    assert outcome.engine_used == "llm"
    assert len(fake_llm.requests) == 2


def test_self_check_rejects_a_segment_that_loses_the_previous_goal(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_json(good_reply())
    first = compact(chat, tokenizer)
    assert first.engine_used == "llm"
    lost_goal = {
        "goal": "确认企业网银手续费",
        "constraints": ["不要给我推荐新品"],
        "done": [],
        "todo": [],
        "decisions": [{"decision": "使用企业网银渠道", "reason": "限额够用"}],
        "facts": [],
        "key_numbers": {"单笔限额": "50万", "手续费": "15元", "对公账户": "62938471"},
    }
    fake_llm.reply_json(lost_goal)
    second = compact(chat, tokenizer, previous=first.segments, first_turn=7)
    assert second.engine_used == "extractive"
    assert "goal lost" in (second.fallback_reason or "")
    assert second.segments[-1].goal == first.segments[0].goal


def test_self_check_rejects_a_lost_constraint_but_accepts_a_restatement(
    fake_llm: FakeLLM,
    chat: ChatClient,
    tokenizer: Tokenizer,
) -> None:
    fake_llm.reply_json(good_reply())
    first = compact(chat, tokenizer)
    kept = good_reply(
        goal=good_reply()["goal"],
        constraints=["不推荐新品"],
        decisions=[],
        done=[],
        key_numbers={"单笔限额": "50万", "手续费": "15元", "对公账户": "62938471"},
    )
    fake_llm.reply_json(kept)
    assert compact(chat, tokenizer, previous=first.segments, first_turn=7).engine_used == "llm"
    fake_llm.reply_json({**kept, "constraints": []})
    dropped = compact(chat, tokenizer, previous=first.segments, first_turn=7)
    assert dropped.engine_used == "extractive"
    assert "constraint lost" in (dropped.fallback_reason or "")


def test_parse_summary_tolerates_small_shape_differences() -> None:
    summary = parse_summary(
        {
            "goal": "g",
            "constraints": "只用企业网银",
            "decisions": ["一笔转", {"decision": "d", "reason": None, "topic": "x"}],
            "key_numbers": {"金额": 120000, "空": None},
        }
    )
    assert summary.constraints == ["只用企业网银"]
    assert [d.decision for d in summary.decisions] == ["一笔转", "d"]
    assert summary.key_numbers == {"金额": "120000"}
    with pytest.raises(ProviderError):
        parse_summary({"goal": ["not", "a", "string"], "key_numbers": {}})
