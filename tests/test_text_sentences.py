"""Sentence splitting in Chinese and English."""

from __future__ import annotations

import pytest

from acn.text.sentences import split_sentences


def test_chinese_terminators_split() -> None:
    text = "我要转账。金额是12万！可以吗？先这样；好"
    assert split_sentences(text) == ["我要转账。", "金额是12万！", "可以吗？", "先这样；", "好"]


def test_newlines_split_and_whitespace_is_stripped() -> None:
    assert split_sentences("  第一行  \n\n 第二行\n") == ["第一行", "第二行"]


@pytest.mark.parametrize(
    "text",
    [
        "Pi is 3.14 and the version is v2.1.0 now.",
        "Use e.g. the default settings here.",
        "Write to ops.team@example.com today.",
        "See https://example.com/a.b?c=1;d=2 for details.",
        "Python 3.11 is required.",
    ],
)
def test_english_dots_that_do_not_end_a_sentence(text: str) -> None:
    assert split_sentences(text) == [text]


def test_english_sentences_split_on_full_stop_and_space() -> None:
    text = "Set the timeout to 45 seconds. Then retry 3 times! Done?"
    assert split_sentences(text) == ["Set the timeout to 45 seconds.", "Then retry 3 times!", "Done?"]


def test_url_before_chinese_text_is_kept_whole() -> None:
    assert split_sentences("访问https://x.com/a?b=1。然后继续") == ["访问https://x.com/a?b=1。", "然后继续"]


def test_closing_quote_stays_with_its_sentence() -> None:
    assert split_sentences("他说：“好的。”然后走了。") == ["他说：“好的。”", "然后走了。"]


def test_numbered_list_markers_are_not_sentences() -> None:
    assert split_sentences("1. 先做A\n2. 再做B") == ["1. 先做A", "2. 再做B"]


def test_initials_and_abbreviations() -> None:
    assert split_sentences("J. Smith went to the U.S. yesterday. Really?") == [
        "J. Smith went to the U.S. yesterday.",
        "Really?",
    ]


@pytest.mark.parametrize("text", ["", "   ", "\n\n", "。。。"])
def test_no_empty_items(text: str) -> None:
    assert all(piece for piece in split_sentences(text))
    assert split_sentences(text) == ([] if not text.strip() else ["。。。"])


def test_not_equal_operator_is_not_an_exclamation() -> None:
    assert split_sentences("if a != b then stop!") == ["if a != b then stop!"]
