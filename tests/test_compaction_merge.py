"""Merging the oldest segments once there are more than max_segments."""

from __future__ import annotations

import pytest

from acn.common.models import Decision, Segment
from acn.compaction.engine import compact_turns
from acn.compaction.merge import merge_segments
from acn.compaction.segment_lines import finish_segment
from acn.text.numbers import value_present
from acn.text.tokens import Tokenizer, load_tokenizer
from tests.compaction_conversations import ZH_FINANCE_TURNS, conversation


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def six_segments(tokenizer: Tokenizer) -> list[Segment]:
    specs = [
        dict(
            goal="把12万转到对公账户62938471",
            constraints=["不要给我推荐新品"],
            decisions=[Decision(decision="超时设为30秒")],
            key_numbers={"金额": "12万", "账户": "62938471", "超时": "30秒"},
        ),
        dict(
            decisions=[Decision(decision="使用企业网银渠道", reason="限额够用")],
            facts=["单笔限额50万"],
            key_numbers={"金额": "50万"},
        ),
        dict(
            decisions=[Decision(decision="超时改成45秒", reason="银行接口高峰期比较慢")],
            key_numbers={"超时": "45秒"},
        ),
        dict(constraints=["不要给我推荐新品。"], facts=["单笔限额50万。"], key_numbers={"金额": "12万"}),
        dict(
            goal="把12万转到对公账户62938471，并核对3月份对账单",
            done=["已生成转账申请单TR-88213"],
            key_numbers={"申请单": "TR-88213"},
        ),
        dict(todo=["核对3月份对账单"], key_numbers={"订单号": "ORD-20250317-8821"}),
    ]
    segments = []
    for index, spec in enumerate(specs):
        first = index * 4 + 1
        segment = Segment(id=f"seg-{index}", turn_range=[first, first + 3], **spec)  # type: ignore[arg-type]
        segments.append(finish_segment(segment, "zh", tokenizer))
    return segments


def test_six_segments_with_max_five_become_two(tokenizer: Tokenizer) -> None:
    segments = six_segments(tokenizer)
    merged = merge_segments(segments, 5, tokenizer=tokenizer, language="zh")
    assert len(merged) == 2
    oldest, newest = merged
    assert newest == segments[5]
    assert oldest.turn_range == [1, 20]
    assert oldest.id.startswith("seg-1-20-")
    assert oldest.text.startswith("[摘要 第1-20轮]")
    assert oldest.tokens == tokenizer.count(oldest.text)


def test_merged_key_numbers_are_the_union(tokenizer: Tokenizer) -> None:
    oldest = merge_segments(six_segments(tokenizer), 5, tokenizer=tokenizer, language="zh")[0]
    values = list(oldest.key_numbers.values())
    assert sorted(values) == sorted(["12万", "62938471", "30秒", "50万", "45秒", "TR-88213"])
    assert len(values) == len(set(values))  # "12万" twice in the sources, once here
    assert oldest.key_numbers["金额"] == "12万" and oldest.key_numbers["金额 2"] == "50万"
    for value in values:
        assert value_present(value, oldest.text)


def test_superseded_decision_resolves_to_the_latest(tokenizer: Tokenizer) -> None:
    oldest = merge_segments(six_segments(tokenizer), 5, tokenizer=tokenizer, language="zh")[0]
    decisions = [d.decision for d in oldest.decisions]
    assert "超时改成45秒" in decisions and "超时设为30秒" not in decisions
    assert oldest.key_numbers["超时"] == "45秒"
    assert [label for label, value in oldest.key_numbers.items() if value == "30秒"] == ["超时（此前）"]
    reasons = {d.decision: d.reason for d in oldest.decisions}
    assert reasons["使用企业网银渠道"] == "限额够用"


def test_merged_lists_drop_near_duplicates_and_keep_the_latest_goal(tokenizer: Tokenizer) -> None:
    oldest = merge_segments(six_segments(tokenizer), 5, tokenizer=tokenizer, language="zh")[0]
    assert oldest.constraints == ["不要给我推荐新品。"]
    assert oldest.facts == ["单笔限额50万。"]
    assert oldest.goal == "把12万转到对公账户62938471，并核对3月份对账单"


def test_no_merge_at_or_below_the_limit_and_repeated_merges_above_it(tokenizer: Tokenizer) -> None:
    segments = six_segments(tokenizer)
    assert merge_segments(segments[:5], 5, tokenizer=tokenizer, language="zh") == segments[:5]
    merged = merge_segments(segments, 1, tokenizer=tokenizer, language="zh")
    assert len(merged) == 1 and merged[0].turn_range == [1, 24]


def test_compact_turns_merges_when_segments_exceed_the_limit(tokenizer: Tokenizer) -> None:
    messages = conversation(ZH_FINANCE_TURNS)
    outcome = compact_turns(
        messages, [], segment_size=3, max_segments=5, engine="extractive", chat=None, tokenizer=tokenizer
    )
    assert [s.turn_range for s in outcome.segments] == [[1, 15], [16, 18], [19, 20]]
    assert outcome.new_segment_ids == [s.id for s in outcome.segments]
    everything = "\n".join(s.text for s in outcome.segments)
    for value in ("ORD-20250317-8821", "12万", "62938471", "2026年6月30日", "45秒", "TR-88213"):
        assert value_present(value, everything), value


def _pairwise_dedupe(items: list[str]) -> list[str]:
    """The definition dedupe_keep_latest implements: drop an item any later item near-duplicates."""
    from acn.compaction.statements import is_near_duplicate

    return [item for i, item in enumerate(items) if not any(is_near_duplicate(item, later) for later in items[i + 1:])]


def test_dedupe_keeps_what_the_pairwise_definition_keeps() -> None:
    # Random statements built from a few stems, numbers and tails, so that near-duplicates, substrings and
    # equal texts with different numbers all occur; the bucketed dedupe must agree with the pairwise one.
    import random

    from acn.compaction.statements import dedupe_keep_latest

    rng = random.Random(11)
    stems = ["对账接口超时设为", "客户要求退款到原卡", "the pool size is now", "部署窗口定在周五晚上", "we agreed to ship on",
             "客户要求退款到原卡，今天处理"]
    tails = ["", "秒", " 了", "。", "，已确认", " seconds", "!"]
    for _ in range(200):
        items = [rng.choice(stems) + rng.choice(["", str(rng.choice([30, 45, 2025]))]) + rng.choice(tails)
                 if rng.random() > 0.1 else rng.choice(["。", "!!", "好", "7"]) for _ in range(rng.randint(0, 25))]
        assert dedupe_keep_latest(items) == _pairwise_dedupe(items)


def test_dedupe_after_an_earlier_dedupe_compares_only_newer_items_and_agrees() -> None:
    # A merged segment's list (an earlier dedupe's result) followed by newer items: the incremental path must
    # give what the pairwise definition gives for the whole list.
    import random

    from acn.compaction.statements import dedupe_keep_latest

    rng = random.Random(12)
    stems = ["对账接口超时设为", "客户要求退款到原卡", "the pool size is now", "部署窗口定在周五晚上", "we agreed to ship on"]
    tails = ["", "秒", " 了", "。", "，已确认", "!"]

    def statement() -> str:
        return rng.choice(stems) + rng.choice(["", str(rng.choice([30, 45]))]) + rng.choice(tails)

    for _ in range(200):
        older = dedupe_keep_latest([statement() for _ in range(rng.randint(1, 20))])
        newer = [statement() for _ in range(rng.randint(0, 10))]
        assert dedupe_keep_latest(older + newer, head=len(older)) == _pairwise_dedupe(older + newer)


def test_incremental_dedupe_agrees_on_substrings_sizes_and_numbers() -> None:
    # Statements of varied length from a small vocabulary: near-duplicates at every size ratio, one text inside
    # another, and short items below the containment length; the indexed older-versus-newer pass must keep
    # exactly what the pairwise definition keeps.
    import random

    from acn.compaction.statements import dedupe_keep_latest

    rng = random.Random(13)
    words = ["退款", "原卡", "超时", "接口", "部署", "周五", "pool", "size", "ship", "订单", "确认", "客户"]

    def statement() -> str:
        text = "".join(rng.choice(words) for _ in range(rng.randint(1, 9)))
        return text + (str(rng.choice([7, 30])) if rng.random() < 0.3 else "")

    for _ in range(300):
        older = dedupe_keep_latest([statement() for _ in range(rng.randint(0, 30))])
        newer = [statement() for _ in range(rng.randint(0, 12))]
        newer += [rng.choice(older)[: rng.randint(1, 12)] for _ in range(2) if older]  # pieces of kept texts
        assert dedupe_keep_latest(older + newer, head=len(older)) == _pairwise_dedupe(older + newer)
