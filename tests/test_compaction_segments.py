"""Turn grouping, keep_recent and segment cutting."""

from __future__ import annotations

from acn.common.conversation import group_turns
from acn.common.models import Message, Segment
from acn.compaction.segments import cut_segments, next_turn_number, segment_id, split_recent
from tests.compaction_conversations import ZH_FINANCE_TURNS, conversation


def test_a_turn_is_a_user_message_and_what_follows() -> None:
    messages = [
        Message(role="system", content="你是客服"),
        Message(role="user", content="查订单"),
        Message(
            role="assistant",
            content="",
            tool_calls=[{"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}],
        ),
        Message(role="tool", content='{"status": "shipped"}', tool_call_id="c1"),
        Message(role="assistant", content="已发货"),
        Message(role="user", content="谢谢"),
    ]
    turns = group_turns(messages)
    assert [turn.number for turn in turns] == [1, 2]
    assert [m.role for m in turns[0].messages] == ["user", "assistant", "tool", "assistant"]
    assert all(m.role != "system" for turn in turns for m in turn.messages)


def test_turn_numbers_come_from_messages_or_continue_after_previous_segments() -> None:
    numbered = group_turns(conversation(ZH_FINANCE_TURNS[:3], first_turn=7))
    assert [turn.number for turn in numbered] == [7, 8, 9]
    previous = [Segment(id="s", turn_range=[1, 6])]
    unnumbered = [Message(role="user", content="a"), Message(role="user", content="b")]
    assert [t.number for t in group_turns(unnumbered, first_turn=next_turn_number(previous))] == [7, 8]


def test_keep_recent_and_segment_size() -> None:
    turns = group_turns(conversation(ZH_FINANCE_TURNS))
    older, recent = split_recent(turns, keep_recent=2)
    assert [t.number for t in recent] == [19, 20]
    chunks = cut_segments(older, segment_size=6)
    assert [[t.number for t in chunk] for chunk in chunks] == [
        [1, 2, 3, 4, 5, 6],
        [7, 8, 9, 10, 11, 12],
        [13, 14, 15, 16, 17, 18],
    ]
    assert split_recent(turns, keep_recent=0) == (turns, [])
    assert split_recent(turns[:1], keep_recent=3) == ([], turns[:1])


def test_segment_ids_are_deterministic() -> None:
    first = Segment(id="", turn_range=[1, 6], goal="转账", key_numbers={"金额": "12万"})
    again = Segment(id="", turn_range=[1, 6], goal="转账", key_numbers={"金额": "12万"}, text="x", tokens=3)
    other = Segment(id="", turn_range=[1, 6], goal="退款")
    assert segment_id(first) == segment_id(again)
    assert segment_id(first).startswith("seg-1-6-")
    assert segment_id(first) != segment_id(other)
