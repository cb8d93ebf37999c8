"""The current views of a session's segments (acn/assembly/current.py): remembered per segment, never stale."""

from __future__ import annotations

from acn.assembly.current import _VIEWS, _VIEWS_LOCK, current_segments
from acn.assembly.fit import Item
from acn.assembly.layers import segment_folded, segment_items
from acn.common.models import Segment
from acn.compaction.segment_lines import brief_segment, render_segment
from acn.text.similarity import normalise
from acn.text.tokens import load_tokenizer


def segment(number: int, goal: str, constraints: list[str], done: list[str]) -> Segment:
    made = Segment(id=f"seg-{number}", turn_range=[number, number], goal=goal, constraints=constraints, done=done)
    return made.model_copy(update={"text": render_segment(made, "zh")})


def from_scratch(segments: list[Segment], stale: set[str]) -> list[str]:
    with _VIEWS_LOCK:
        _VIEWS.clear()
    return [view.text for view in current_segments(segments, stale, "zh")]


def chat() -> list[Segment]:
    return [segment(1, "退订单 30021", ["只用顺丰"], ["第1轮：订单 30021 金额 931 元"]),
            segment(2, "退订单 30021", ["只用顺丰"], ["第2轮：工单 T-5521 已建"]),
            segment(3, "退订单 30021", ["只用顺丰"], ["第3轮：预计 12月9日 退款"])]


def test_a_new_newest_segment_renders_only_itself_the_earlier_views_are_the_same_objects() -> None:
    segments = chat()
    first = current_segments(segments, set(), "zh")
    grown = [*segments[:2], segments[2].model_copy(update={"done": [*segments[2].done, "第4轮：电话 13800138000"],
                                                             "text": segments[2].text + " 第4轮"})]
    second = current_segments(grown, set(), "zh")
    assert second[0] is first[0] and second[1] is first[1]  # kept: same segment, same segments before it
    assert second[2] is not first[2] and "13800138000" in second[2].text
    assert [view.text for view in second] == from_scratch(grown, set())
    # The carried goal and constraint are shown once, in the oldest segment's line.
    assert "只用顺丰" in second[0].text and "只用顺丰" not in second[1].text


def test_a_changed_earlier_segment_renders_the_later_ones_again_with_what_they_now_inherit() -> None:
    segments = chat()
    before = current_segments(segments, set(), "zh")
    assert "退订单 30021" not in before[1].text  # the goal is carried from the first segment
    # The oldest segment rolled up under another goal: the second no longer inherits its own goal, so shows it.
    changed = [segment(1, "改地址", ["只用顺丰"], ["第1轮：订单 30021 金额 931 元"]), *segments[1:]]
    after = current_segments(changed, set(), "zh")
    assert "退订单 30021" in after[1].text
    assert [view.text for view in after] == from_scratch(changed, set())


def test_superseded_values_and_the_language_are_part_of_what_a_view_is_kept_by() -> None:
    segments = chat()
    plain = current_segments(segments, set(), "zh")
    withheld = current_segments(segments, {"931"}, "zh")
    assert "931" in plain[0].text and "931" not in withheld[0].text
    assert [view.text for view in withheld] == from_scratch(segments, {"931"})
    english = current_segments(segments, set(), "en")
    assert english[0].text != plain[0].text and english[0].text == render_segment(segments[0], "en")


def test_a_segments_folded_text_follows_its_text() -> None:
    view = chat()[0]
    assert segment_folded(view) == normalise(view.text)
    view.text = view.text + " 新增 88 元"
    assert segment_folded(view) == normalise(view.text) and "88" in segment_folded(view)


def test_a_segments_lines_and_their_costs_follow_its_fields() -> None:
    tokenizer = load_tokenizer()
    views = current_segments(chat(), set(), "zh")
    items = segment_items(views, "订单 30021 金额", "zh", tokenizer, brief_only=False)
    assert [item.key for item in items] == ["seg-3", "seg-1", "seg-2"]  # the newest first, then by relevance
    for item, view in zip(items, [views[2], views[0], views[1]], strict=True):
        assert item.variants == list(dict.fromkeys([view.text, brief_segment(view, "zh")]))
        assert item.costs == [tokenizer.count(variant) + 1 for variant in item.variants]
    assert [item.cut for item in items] == [True, False, False]
    own = chat()  # not the kept views, which are shared: this test changes one
    def first_segment() -> Item:
        return next(item for item in segment_items(own, "订单", "zh", tokenizer, brief_only=True)
                    if item.key == "seg-1")

    assert first_segment().variants == [brief_segment(own[0], "zh")]
    own[0].goal = "改地址"  # a changed field makes its lines and costs again
    brief = first_segment()
    assert brief.variants == [brief_segment(own[0], "zh")] and "改地址" in brief.variants[0]
    assert brief.costs == [tokenizer.count(brief.variants[0]) + 1]
