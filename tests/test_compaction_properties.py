"""Invariants: no key number is ever lost, whatever the wording; revoked constraints stop carrying."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from acn.common.models import Message, Segment
from acn.compaction.engine import compact_turns
from acn.compaction.verify import verify_numbers
from acn.text.numbers import extract_key_numbers, value_present
from acn.text.tokens import load_tokenizer
from tests.compaction_conversations import conversation

TOKENIZER = load_tokenizer()

TEMPLATES = [
    "我的订单号是ORD-{a}-{b}，麻烦查一下。",
    "好的，超时改成{c}秒，因为接口慢。",
    "请在2026年{m}月{d}日之前把{c}万转到账户{a}。",
    "Set the retry limit to {c}.",
    "The invoice INV{b} totals ${c},{b3}.",
    "不要给我推荐新品。",
    "谢谢！",
    "已经帮您提交工单TK-{b}，预计{c}个工作日处理完成。",
]


def sentence_strategy() -> st.SearchStrategy[str]:
    fields = st.fixed_dictionaries(
        {
            "a": st.integers(10_000_000, 99_999_999).map(str),
            "b": st.integers(1000, 9999).map(str),
            "b3": st.integers(100, 999).map(str),
            "c": st.integers(2, 500).map(str),
            "m": st.integers(1, 12).map(str),
            "d": st.integers(1, 28).map(str),
        }
    )
    return st.tuples(st.sampled_from(TEMPLATES), fields).map(lambda pair: pair[0].format(**pair[1]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(sentence_strategy(), sentence_strategy()), min_size=1, max_size=8), st.integers(1, 4)
)
def test_extractive_compaction_never_loses_a_key_number(turns: list[tuple[str, str]], size: int) -> None:
    outcome = compact_turns(
        conversation(turns),
        [],
        segment_size=size,
        max_segments=2,
        engine="extractive",
        chat=None,
        tokenizer=TOKENIZER,
    )
    rendered = "\n".join(segment.text for segment in outcome.segments)
    source = "\n".join(user + "\n" + assistant for user, assistant in turns)
    for number in extract_key_numbers(source):
        assert value_present(number.value, rendered), number


@settings(max_examples=40, deadline=None)
@given(st.lists(sentence_strategy(), min_size=1, max_size=6), st.sets(st.integers(0, 5)))
def test_verifier_restores_whatever_a_summary_dropped(sentences: list[str], dropped: set[int]) -> None:
    source = extract_key_numbers("\n".join(sentences))
    kept = {f"n{i}": n.value for i, n in enumerate(source) if i not in dropped}
    check = verify_numbers(Segment(id="", turn_range=[1, 1], key_numbers=kept), source)
    assert check.in_source == len(source)
    assert check.preserved + check.restored == len(source)
    for number in source:
        assert value_present(number.value, "\n".join(check.segment.key_numbers.values()))


def test_a_revoked_constraint_is_not_carried_forward() -> None:
    first = compact_turns(
        conversation([("不要给我推荐新品，我只想办转账。", "好的。")]),
        [],
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=TOKENIZER,
    )
    assert any("不要给我推荐新品" in item for item in first.segments[0].constraints)
    later = [
        Message(role="user", content="现在可以给我推荐新品了。", turn=2),
        Message(role="assistant", content="好的，为您推荐理财产品A。", turn=2),
    ]
    second = compact_turns(
        later,
        first.segments,
        segment_size=6,
        max_segments=5,
        engine="extractive",
        chat=None,
        tokenizer=TOKENIZER,
    )
    assert not any("不要给我推荐新品" in item for item in second.segments[-1].constraints)
