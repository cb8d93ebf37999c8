"""A long text is folded a part at a time (acn/text/parts.py): the parts' folding must be the
whole's, exactly, or a relevance or a dedup decision would change with a text's length."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from acn.text.byte_cache import TEXT_CACHE
from acn.text.parts import PARTS_MAX_CHARS, PARTS_MIN_CHARS
from acn.text.similarity import _normalise, normalise

# Separators, full- and half-width; combining marks, Hangul jamo (which compose), ligatures and letters whose case
# folding grows (ß, ﬁ), an ideographic space, CJK and ASCII letters and digits.
PIECES = ["订单号", "金额", "T335152", "2024-08-28", "ABC", "abc", "；", ";", "，", ",", "|", " | ", "\n", "：", "。",
          "（", "）", " ", "\u3000", "e", "\u0301", "\u0327", "\u1100", "\u1161", "\u11a8", "가", "ß", "ﬁ", "Σ", "ς",
          "①", "Ⅻ", "ｱ", "ﾞ", "ｶ", "Å", "\u212b", "_", "😀", "x²", "½",
          "！", "？", "!", "?", "]", "】", "」", "”", "。\n", ")\r\n", "完毕。\n[来自记忆 · 第12轮] 助手: "]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=500))
def test_the_parts_fold_to_the_whole(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert normalise(text) == _normalise(text)


def test_a_long_text_leaves_its_parts_in_the_cache_not_itself() -> None:
    TEXT_CACHE.clear()
    rng = random.Random(47)
    text = "[摘要 第1-354轮] 已完成: " + "；".join(
        f"已为您登记工单 T{rng.randint(100000, 999999)}，预计 {rng.randint(1, 12)}月{rng.randint(1, 28)}日 前处理完毕"
        for _ in range(120))
    assert len(text) >= PARTS_MIN_CHARS
    assert normalise(text) == _normalise(text)
    held = {key[1] for key in TEXT_CACHE._entries if isinstance(key, tuple)}
    assert text not in held
    assert "；已为您登记工单 T" in "".join(held)  # the parts are what a changed segment finds again


def test_a_text_past_the_parts_limit_is_folded_whole() -> None:

    TEXT_CACHE.clear()
    text = ",".join(f"A{index}" for index in range(PARTS_MAX_CHARS // 3))
    assert len(text) > PARTS_MAX_CHARS
    assert normalise(text) == _normalise(text)
    assert len(TEXT_CACHE) == 1
