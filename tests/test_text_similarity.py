"""Bigram Dice similarity and normalisation."""

from __future__ import annotations

import time

from hypothesis import given
from hypothesis import strategies as st

from acn.text.similarity import can_reach, normalise, shingle_similarity, shingles, similarity


def test_normalise_folds_width_case_punctuation_and_space() -> None:
    assert normalise("Ｈello，  World！ ＡＢＣ１２３") == "helloworldabc123"


def test_identical_after_normalisation() -> None:
    assert similarity("请帮我查询订单ORD-1的状态", "请帮我查询订单 ORD-1 的状态。") == 1.0
    assert similarity("Hello World!", "hello  world") == 1.0


def test_near_duplicates_score_high() -> None:
    assert similarity("请帮我查询一下我的订单状态，谢谢", "请帮我查询一下我的订单状态谢谢啦") >= 0.9
    assert similarity("Please check the status of my order", "please check the status of my order now") >= 0.9


def test_different_numbers_lower_the_score() -> None:
    assert similarity("超时改成30秒", "超时改成45秒") < 0.9


def test_unrelated_texts_score_low() -> None:
    assert similarity("今天天气不错", "订单号是多少") < 0.2
    assert similarity("timeout", "budget") < 0.2


def test_empty_texts() -> None:
    assert similarity("", "") == 1.0
    assert similarity("a", "") == 0.0
    assert similarity("好", "好") == 1.0


def test_precomputed_shingles_and_prefilter() -> None:
    a, b = shingles("abcdefgh"), shingles("ab")
    assert not can_reach(a, b, 0.9)
    assert can_reach(a, a, 0.9)
    assert shingle_similarity(a, a) == 1.0


def test_fast_enough_for_quadratic_use() -> None:
    texts = [f"消息{i}：请把超时时间改成{i}秒，并且记录订单ORD-{i}" * 5 for i in range(100)]
    sets = [shingles(text) for text in texts]
    start = time.perf_counter()
    for a in sets:
        for b in sets:
            shingle_similarity(a, b)
    assert time.perf_counter() - start < 1.0


@given(st.text(max_size=50), st.text(max_size=50))
def test_bounded_and_symmetric(a: str, b: str) -> None:
    score = similarity(a, b)
    assert 0.0 <= score <= 1.0
    assert score == similarity(b, a)
    assert similarity(a, a) == 1.0
