"""Milvus Lite segments with the product's cached segmentation (acn/storage/database/lite/tokens.py), giving its own tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from acn.server import create_app
from acn.storage.database.lite.tokens import SAMPLES, share_segmentation
from acn.text.terms import bm25_tokens
from bench import zh_daily
from bench.perf import memory_text
from tests.conftest import make_settings, post
from tests.test_text_terms import PIECES

# The pure-Python Lite segments in this process; the C++ engine (the engine run) has no such analyzer.
JiebaAnalyzer = pytest.importorskip("milvus_lite.analyzer.jieba_analyzer").JiebaAnalyzer


def lites_own(text: str) -> list[str]:
    """What Lite's analyzer makes of a text with its own segmentation."""
    tokenize = JiebaAnalyzer.tokenize
    return list(getattr(tokenize, "original", tokenize)(JiebaAnalyzer(mode="search"), text))


def test_a_lite_store_started_with_the_app_segments_with_the_cached_segmentation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = getattr(JiebaAnalyzer.tokenize, "original", JiebaAnalyzer.tokenize)
    monkeypatch.setattr(JiebaAnalyzer, "tokenize", own)  # as before any app started (restored after the test)
    app = create_app(make_settings(tmp_path))
    try:
        assert JiebaAnalyzer.tokenize is not own and JiebaAnalyzer.tokenize.original is own  # type: ignore[attr-defined]
        client = app.test_client()
        ns = {"agent_id": "a", "session_id": "s"}
        assert post(client, "memory_write", {**ns, "items": [{"content": "我们决定把超时设为45秒"}]}).status_code == 200
        found = post(client, "memory_retrieve", {**ns, "query": "超时设为多少秒", "trigger": "always"}).get_json()
        assert "45秒" in found["text"]
    finally:
        app.extensions["acn"].close()


@settings(max_examples=300, deadline=None)
@given(st.lists(PIECES, max_size=40))
def test_lites_tokens_are_unchanged_on_random_text(pieces: list[str]) -> None:
    assert share_segmentation()
    text = "".join(pieces)
    assert JiebaAnalyzer(mode="search").tokenize(text) == lites_own(text)


def test_lites_tokens_are_unchanged_on_memories_and_chats() -> None:
    import random

    rng = random.Random(5)
    texts = [memory_text(rng)[0] for _ in range(500)]
    texts += [message.text for seed in zh_daily.seeds("dev", 2) for message in zh_daily.generate(seed).messages]
    assert share_segmentation()
    analyzer = JiebaAnalyzer(mode="search")
    assert [analyzer.tokenize(text) for text in texts] == [lites_own(text) for text in texts]


def test_a_segmentation_that_differs_is_not_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    own = getattr(JiebaAnalyzer.tokenize, "original", JiebaAnalyzer.tokenize)
    monkeypatch.setattr(JiebaAnalyzer, "tokenize", own)  # as before any hand-over (restored after the test)
    # Lite keeps only stripped tokens; a segmentation that keeps a space token differs on the samples.
    assert not share_segmentation(lambda text: [*bm25_tokens(text), " "] if text else [])
    assert JiebaAnalyzer.tokenize is own
    assert share_segmentation()
    assert JiebaAnalyzer.tokenize is not own and JiebaAnalyzer.tokenize.original is own  # type: ignore[attr-defined]
    assert all(JiebaAnalyzer(mode="search").tokenize(sample) == own(JiebaAnalyzer(mode="search"), sample)
               for sample in SAMPLES)


def test_other_modes_and_stop_words_are_lites_own() -> None:
    assert share_segmentation()
    text = "中华人民共和国的超时时间设为30秒 and the status"
    exact = JiebaAnalyzer(mode="exact")
    assert exact.tokenize(text) == list(JiebaAnalyzer.tokenize.original(exact, text))  # type: ignore[attr-defined]
    stopped = JiebaAnalyzer(mode="search", stop_words={"the", "的"})
    assert stopped.tokenize(text) == [token for token in lites_own(text) if token not in {"the", "的"}]
