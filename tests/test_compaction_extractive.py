"""The offline extractive engine on realistic zh and en conversations, through compact_turns."""

from __future__ import annotations

import pytest

from acn.common.errors import ValidationError
from acn.common.models import Message
from acn.compaction.engine import compact_turns
from acn.compaction.segment_lines import render_working_summary
from acn.text.numbers import extract_key_numbers, value_present
from acn.text.tokens import Tokenizer, load_tokenizer
from tests.compaction_conversations import EN_PROJECT_TURNS, ZH_FINANCE_TURNS, conversation

ZH_NUMBERS = [
    "ORD-20250317-8821",
    "12万",
    "62938471",
    "2026年6月30日",
    "45秒",
    "13812345678",
    "2,399元",
    "finance@example.com",
    "TR-88213",
]


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def everything(segment_text: str, key_numbers: dict[str, str]) -> str:
    return segment_text + "\n" + "\n".join(key_numbers.values())


def test_chinese_finance_conversation_keeps_every_number(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(ZH_FINANCE_TURNS),
        [],
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=tokenizer,
    )
    assert outcome.engine_used == "extractive" and outcome.fallback_reason is None
    assert [s.turn_range for s in outcome.segments] == [[1, 6], [7, 12], [13, 18], [19, 20]]
    summary = render_working_summary(outcome.segments)
    for value in ZH_NUMBERS:
        assert value_present(value, summary), value
    source = "\n".join(user + "\n" + assistant for user, assistant in ZH_FINANCE_TURNS)
    for number in extract_key_numbers(source):
        assert any(value_present(number.value, everything(s.text, s.key_numbers)) for s in outcome.segments)
    assert outcome.numbers_in_source >= len(ZH_NUMBERS)
    assert outcome.numbers_preserved == outcome.numbers_in_source
    assert outcome.numbers_restored == 0


def test_chinese_working_state_is_classified(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(ZH_FINANCE_TURNS),
        [],
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=tokenizer,
    )
    first, second, third, last = outcome.segments
    assert "12万" in first.goal and "62938471" in first.goal and "2026年6月30日" in first.goal
    assert all(segment.goal == first.goal for segment in outcome.segments)  # carried forward
    assert any("不要给我推荐新品" in item for item in first.constraints)
    assert any("不要给我推荐新品" in item for item in last.constraints)  # still in force at the end
    assert any("finance@example.com" in item for item in third.constraints)
    assert any("下周" in item and "对账单" in item for item in last.todo)
    channel = next(d for d in second.decisions if "企业网银" in d.decision)
    assert channel.reason == "限额够用"


def test_superseded_timeout_resolves_to_the_latest_value(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(ZH_FINANCE_TURNS[:6]),
        [],
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=tokenizer,
    )
    [segment] = outcome.segments
    timeout = [d for d in segment.decisions if "超时" in d.decision]
    assert len(timeout) == 1
    assert "45秒" in timeout[0].decision and "30秒" not in timeout[0].decision
    assert timeout[0].reason == "银行接口高峰期比较慢"
    assert segment.key_numbers["超时"] == "45秒"
    earlier = [label for label, value in segment.key_numbers.items() if value == "30秒"]
    assert earlier and all("此前" in label or "earlier" in label for label in earlier)


def test_pleasantries_are_dropped(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(ZH_FINANCE_TURNS),
        [],
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=tokenizer,
    )
    statements = [item for s in outcome.segments for item in [*s.done, *s.todo, *s.facts, *s.constraints]]
    for pleasantry in ("你好", "谢谢", "不客气", "收到", "嗯嗯", "再见", "还有什么可以帮您"):
        assert not any(item.strip("。！？") == pleasantry for item in statements), pleasantry
    assert "很高兴为您服务" not in render_working_summary(outcome.segments)
    assert "祝您工作顺利" not in render_working_summary(outcome.segments)


def test_english_conversation(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(EN_PROJECT_TURNS),
        [],
        segment_size=10,
        max_segments=5,
        engine="auto",
        chat=None,
        tokenizer=tokenizer,
    )
    [segment] = outcome.segments
    assert segment.text.startswith("[Summary turns 1-10] Goal: I need to migrate")
    assert "Postgres 16" in segment.goal and "March 31, 2026" in segment.goal
    assert segment.constraints == ["Do not touch the legacy invoice tables"]
    pool = [d for d in segment.decisions if "pool size" in d.decision]
    assert [d.decision for d in pool] == ["Change the pool size to 50"]
    assert pool[0].reason == "peak traffic doubled"
    region = next(d for d in segment.decisions if "eu-west-1" in d.decision)
    assert region.reason == "most customers are in Europe"
    assert any("load-test" in item for item in segment.todo)
    for value in ("$45,000", "MIG-4471", "eu-west-1", "18 ms", "50"):
        assert value_present(value, segment.text), value
    assert any(label.endswith("(earlier)") and value == "20" for label, value in segment.key_numbers.items())
    assert "Hi there" not in segment.text and "You're welcome" not in segment.text


def test_language_can_be_forced_and_engine_is_validated(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(ZH_FINANCE_TURNS[:3]),
        [],
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=tokenizer,
        language="en",
    )
    assert outcome.segments[0].text.startswith("[Summary turns 1-3] Goal:")
    with pytest.raises(ValidationError):
        compact_turns([], [], segment_size=6, max_segments=5, engine="magic", chat=None, tokenizer=tokenizer)


def test_llm_requested_without_a_client_falls_back_and_says_why(tokenizer: Tokenizer) -> None:
    outcome = compact_turns(
        conversation(ZH_FINANCE_TURNS[:3]),
        [],
        segment_size=6,
        max_segments=5,
        engine="llm",
        chat=None,
        tokenizer=tokenizer,
    )
    assert outcome.engine_used == "extractive"
    assert outcome.fallback_reason == "no LLM endpoint configured"


def test_compacting_later_turns_continues_from_previous_segments(tokenizer: Tokenizer) -> None:
    messages = conversation(ZH_FINANCE_TURNS)
    first = compact_turns(
        messages[:12], [], segment_size=6, max_segments=5, engine="extractive", chat=None, tokenizer=tokenizer
    )
    second = compact_turns(
        messages[12:24],
        first.segments,
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=tokenizer,
    )
    assert [s.turn_range for s in second.segments] == [[1, 6], [7, 12]]
    new = second.segments[-1]
    assert second.new_segment_ids == [new.id]
    assert new.goal == first.segments[0].goal
    assert any("不要给我推荐新品" in item for item in new.constraints)


def test_raw_tool_output_is_not_copied_but_its_numbers_are_kept(tokenizer: Tokenizer) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "track", "arguments": "{}"}}
    messages = [
        Message(role="user", content="帮我查一下快递到哪了", turn=1),
        Message(role="assistant", content="", tool_calls=[call], turn=1),
        Message(
            role="tool",
            tool_call_id="c1",
            turn=1,
            content='{"carrier": "SF", "waybill": "SF1234567890", "eta": "2025-03-21"}',
        ),
        Message(role="assistant", content="您的快递已到达上海转运中心，预计3月21日送达。", turn=1),
    ]
    outcome = compact_turns(
        messages, [], segment_size=6, max_segments=5, engine="extractive", chat=None, tokenizer=tokenizer
    )
    [segment] = outcome.segments
    assert "carrier" not in segment.text
    assert value_present("SF1234567890", segment.text) and value_present("2025-03-21", segment.text)
    assert any("上海转运中心" in item for item in segment.done + segment.facts)
