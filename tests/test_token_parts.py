"""A long text is counted as the sum of its parts (acn/text/parts.py): the sum must be the count of
the whole, exactly, or a context could pass its hard budget."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acn.text.parts import PARTS_MAX_CHARS, PARTS_MIN_CHARS
from acn.text.tokens import Tokenizer, load_tokenizer

# Letters, digits and separators of every kind the pattern treats apart: CJK and ASCII letters, digit runs longer
# than three, contractions, full- and half-width punctuation, spaces, tabs, newlines and carriage returns, an
# ideographic space, an emoji, a combining mark, letters outside ASCII and CJK (accented, Cyrillic, Hangul).
PIECES = ["的", "订单号", "金额", "元", "T335152", "2024-08-28", "138 0013 8000", "12345678", "hello", "World",
          "'s", "'ll", "n't", "；", ";", "; ", "；\n", "，", ",", "。", ".", "|", " | ", ": ", "：", "（", "）", "(",
          ")", "[摘要 第1-354轮]", " ", "  ", "\t", "\n", "\n\n", "\r\n", " \n", "\u3000", "😀", "e\u0301", "é",
          "Привет", "한국어", "=", "x=1", "…", "-", "_", "'",
          "！", "？", "!", "?", "]", "】", "」", "”", "。\n", ")\r\n", "完毕。\n[来自记忆 · 第12轮] 助手: "]


def whole(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encoding.encode(text, disallowed_special=()))


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def test_the_default_encoding_is_counted_by_parts(tokenizer: Tokenizer) -> None:
    assert tokenizer._by_parts  # the shipped cl100k_base: otherwise the tests below test nothing new


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(PIECES), min_size=1, max_size=400))
def test_the_sum_of_the_parts_is_the_count_of_the_whole(pieces: list[str]) -> None:
    tokenizer = load_tokenizer()
    text = "".join(pieces)
    assert tokenizer.count(text) == whole(tokenizer, text)


def test_the_sum_is_exact_on_rendered_segments_and_layers(tokenizer: Tokenizer) -> None:
    rng = random.Random(47)
    for _ in range(300):
        items = ["".join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(rng.randint(20, 80))]
        for separator in ("；", "; ", "\n", ";", "；\n", " | "):
            text = "[摘要 第1-354轮] 已完成: " + separator.join(items)
            assert len(text) >= PARTS_MIN_CHARS or tokenizer.count(text) == whole(tokenizer, text)
            assert tokenizer.count(text) == whole(tokenizer, text), text


def test_a_text_that_changes_at_its_end_encodes_only_its_new_part(tokenizer: Tokenizer) -> None:
    lines = [f"第{t}轮：我的订单号 {33622 + t} 怎么样了？上次说的金额是 {900 + t} 元" for t in range(60)]
    text = "\n".join(lines)
    counting = Tokenizer(tokenizer.encoding, tokenizer.name)  # its own caches
    assert counting.count(text) == whole(tokenizer, text)
    assert counting._cached_count.cache_info().misses == 60  # a part a line
    longer = text + "\n第60轮：新的一行 12 元"
    assert counting.count(longer) == whole(tokenizer, longer)
    assert counting._cached_count.cache_info().misses == 61  # only the new line was encoded


def test_lines_that_end_in_punctuation_are_counted_alone_whatever_comes_next(tokenizer: Tokenizer) -> None:
    # A context's memory lines end in '。' (an answer) and change from turn to turn (which memories fit): cut only
    # before a comma, each part held one line's tail and the next one's head, new whenever a line left.
    lines = [f"[来自记忆 · 第{t}轮] 助手: 已为您登记工单 T{600000 + t}，预计 {t % 12 + 1}月{t % 28 + 1}日 前处理完毕。"
             for t in range(40)]
    counting = Tokenizer(tokenizer.encoding, tokenizer.name)
    text = "\n".join(lines)
    assert counting.count(text) == whole(tokenizer, text)
    encoded = counting._cached_count.cache_info().misses
    fewer = "\n".join(lines[:12] + lines[13:30] + lines[31:])  # two lines left out
    assert counting.count(fewer) == whole(tokenizer, fewer)
    assert counting._cached_count.cache_info().misses == encoded  # every part was met before


def test_a_long_text_counted_again_is_not_cut_again(tokenizer: Tokenizer) -> None:
    lines = [f"第{t}轮：我的订单号 {33622 + t} 怎么样了？上次说的金额是 {900 + t} 元" for t in range(60)]
    text = "\n".join(lines)
    counting = Tokenizer(tokenizer.encoding, tokenizer.name)
    assert counting.count(text) == whole(tokenizer, text)
    parts = counting._cached_count.cache_info()
    assert parts.hits + parts.misses == 60  # a part a line, each looked up once
    same = "".join(["\n".join(lines[:30]), "\n", "\n".join(lines[30:])])  # an equal text, another object
    assert same == text and same is not text
    assert counting.count(same) == whole(tokenizer, text)
    again = counting._cached_count.cache_info()
    assert again.hits + again.misses == 60  # found whole by its digest: no part looked up again


def test_another_encoding_is_counted_whole() -> None:
    import tiktoken

    from acn.text.model_cache import load_offline_cl100k

    cl100k = load_offline_cl100k(None)
    other = tiktoken.Encoding(name="other", pat_str=r"\S+|\s+", mergeable_ranks=cl100k._mergeable_ranks,
                              special_tokens={})
    tokenizer = Tokenizer(other, "other")
    assert not tokenizer._by_parts
    text = "订单号；" * (PARTS_MIN_CHARS // 2)
    assert tokenizer.count(text) == len(other.encode(text))


def test_a_text_past_the_parts_limit_is_counted_whole(tokenizer: Tokenizer) -> None:

    counting = Tokenizer(tokenizer.encoding, tokenizer.name)
    text = ",".join(f"a{index}" for index in range(PARTS_MAX_CHARS // 3))  # a tool's JSON: a comma every few chars
    assert len(text) > PARTS_MAX_CHARS
    assert counting.count(text) == whole(tokenizer, text)
    assert counting._cached_count.cache_info().currsize == 0  # one digest entry, not thousands of parts
