"""BM25 tokens one block at a time, and content terms one Chinese run at a time: exactly what jieba's search mode
makes of the whole text, and of each run segmented again."""

from __future__ import annotations

import random
import re

import jieba
from hypothesis import given, settings
from hypothesis import strategies as st

from acn.text.terms import (
    CACHED_BLOCK_CHARS,
    CACHED_TOKENS_CHARS,
    STOP_ZH,
    _block_tokens_cached,
    _run_words_cached,
    _segmented_terms,
    bm25_tokens,
    content_terms,
)
from bench.perf import conversation_turn

_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")


def jiebas(text: str) -> tuple[str, ...]:
    return tuple(w.lower() for w in jieba.cut_for_search(text, HMM=True) if w.strip())


# Word runs, Chinese with words jieba splits and n-grams it adds, IDs and numbers, the characters jieba's word
# pattern admits (+#&._%-), punctuation, and whitespace including CRLF, tabs, ideographic and no-break spaces.
PIECES = st.sampled_from([
    "中华人民共和国", "超时时间设为30秒", "订单号", "退款", "张经理", "ORD-2024-0042", "3.14", "C++", "C#", "50%",
    "a&b", "Hello", "WORLD", "status", "in_transit", "İstanbul", "，", "。", "！", "“", "\"", "{", "}", ":", "[", "]",
    " ", "  ", "\t", "\r\n", "\n", "\u3000", "\xa0", "\x1c", "🙂", "é", "ß",
])


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_blockwise_tokens_equal_jiebas(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert bm25_tokens(text) == jiebas(text)
    long = text * (CACHED_TOKENS_CHARS // max(len(text), 1) + 1)  # the uncached path too
    assert bm25_tokens(long) == jiebas(long)


def test_tool_output_and_its_blocks_are_kept() -> None:
    [result] = [m["content"] for m in conversation_turn(7) if m["role"] == "tool"]
    assert len(result) > CACHED_TOKENS_CHARS
    assert bm25_tokens(result) == jiebas(result)
    blocks = jieba.re_han_default.split(result)[1::2]
    assert any(_block_tokens_cached.holds(block) for block in blocks)
    assert bm25_tokens(result) == jiebas(result)


def zh_terms(text: str) -> list[str]:
    """The Chinese content terms as they were made before runs were kept: jieba on each run, every time."""
    runs = [run for run in _CJK_RUN.findall(text.lower())]
    return [w for run in runs for w in jieba.cut_for_search(run) if w.strip() and w not in STOP_ZH]


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES | st.sampled_from(["我的订单号", "上次说的金额是", "怎么样了", "第", "轮", "元", "已为您登记工单",
                                          "预计", "前处理完毕", "收货电话改成"]), max_size=40))
def test_content_terms_of_kept_runs_equal_jiebas(pieces: list[str]) -> None:
    text = "".join(pieces)
    first = _segmented_terms(text)  # runs segmented, short ones kept
    assert first == _segmented_terms(text)  # then read back from the cache
    assert [t for t in first if _CJK_RUN.fullmatch(t)] == zh_terms(text)


def test_a_short_run_is_kept_and_a_long_one_is_not() -> None:
    short, long = "上次说的金额是", "我们" * CACHED_BLOCK_CHARS
    assert content_terms(f"第3001轮：{short} 931 元 {long}")
    assert _run_words_cached.holds(short) and not _run_words_cached.holds(long)


def test_segmenting_a_text_says_every_byte_it_added_to_the_text_cache_its_runs_included() -> None:
    # The start-up warmer (assembly/warm.py) segments texts until its share of the cache is used, by these counts: a
    # run's entry left out, it overfilled the cache and pushed out the texts it had segmented first.
    from acn.text.byte_cache import TEXT_CACHE
    from acn.text.terms import segmented

    rng = random.Random(47)
    runs = ["".join(chr(rng.randint(0x4E00, 0x9FA5)) for _ in range(12)) for _ in range(3)]
    text = f"第一轮：{runs[0]} 订单，{runs[1]}；{runs[2]}"  # no English word or number: their stems are kept apart
    assert TEXT_CACHE.bytes + 100_000 < TEXT_CACHE.max_bytes  # nothing is evicted while it segments
    before = TEXT_CACHE.bytes
    added = segmented(text)
    assert added == TEXT_CACHE.bytes - before and added > 0
    assert all(_run_words_cached.holds(run) for run in runs)
    assert segmented(text) == 0
