"""BM25 tokens one block at a time: exactly what jieba's search mode makes of the whole text."""

from __future__ import annotations

import jieba
from hypothesis import given, settings
from hypothesis import strategies as st

from acn.text.terms import CACHED_TOKENS_CHARS, _block_tokens_cached, bm25_tokens
from bench.perf import conversation_turn


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
