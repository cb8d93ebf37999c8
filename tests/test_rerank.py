"""The optional rerank endpoint (ACN_RERANK_URL, issue 17 §2): the Cohere/Jina protocol against a loopback stand-in,
and every failure falling back to the original order. No quality claim: the stand-in ranks by a rule of its own."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from acn.common.errors import ConfigurationError, ProviderError
from acn.common.settings import Settings
from acn.providers.rerank import Reranker, parse_results
from acn.server import create_app
from tests.conftest import make_settings
from tests.stand_in_http import stand_in

DOCUMENTS = ["the cat sat", "the reconciliation timeout is 30 seconds", "timeout", "ramen"]


def by_length(path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
    """A stand-in reranker: longest document first (Cohere's answer shape)."""
    order = sorted(range(len(body["documents"])), key=lambda i: -len(body["documents"][i]))[: body["top_n"]]
    return 200, {"id": "r1", "results": [{"index": i, "relevance_score": 1.0 / (1 + rank)}
                                         for rank, i in enumerate(order)]}, {}


def test_the_request_and_the_answer_follow_the_cohere_and_jina_protocol() -> None:
    with stand_in(by_length) as endpoint:
        reranker = Reranker(endpoint.url + "/v1/rerank", model="rr-model", api_key="rk")
        assert reranker.rerank("timeout?", DOCUMENTS, top_n=2) == [(1, 1.0), (0, 0.5)]
        sent = endpoint.requests[0]
        assert sent["path"] == "/v1/rerank" and sent["headers"]["Authorization"] == "Bearer rk"
        assert sent["json"] == {"model": "rr-model", "query": "timeout?", "documents": DOCUMENTS, "top_n": 2,
                                "return_documents": False}
        assert reranker.failures == 0


def test_a_score_field_named_score_is_read_too() -> None:
    assert parse_results({"results": [{"index": 2, "score": 0.1}, {"index": 0, "score": 0.9}]}, 3, 5) == \
        [(0, 0.9), (2, 0.1)]


@pytest.mark.parametrize("answer", [
    (500, {"error": "boom"}, {}),
    (307, b"", {"Location": "http://127.0.0.1:9/elsewhere"}),
    (200, b"not json", {}),
    (200, {"results": [{"index": 7, "relevance_score": 1.0}]}, {}),  # out of range
    (200, {"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 0.5}]}, {}),  # twice
    (200, {"results": [{"index": 0, "relevance_score": "high"}]}, {}),
    (200, {"data": []}, {}),
], ids=["5xx", "redirect", "not-json", "index-out-of-range", "repeated-index", "score-not-number", "no-results"])
def test_a_failing_reranker_leaves_the_order_as_it_was(answer: tuple[int, Any, dict[str, str]]) -> None:
    with stand_in(lambda path, headers, body: answer) as endpoint:
        reranker = Reranker(endpoint.url + "/rerank")
        assert reranker.rerank("q", DOCUMENTS, top_n=3) == [(0, 0.0), (1, 0.0), (2, 0.0)]
        assert reranker.failures == 1
        with pytest.raises(ProviderError):
            reranker.rerank_strict("q", DOCUMENTS, 3)


def test_a_slow_reranker_times_out_and_leaves_the_order() -> None:
    def slow(path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        time.sleep(1.5)
        return by_length(path, headers, body)

    with stand_in(slow) as endpoint:
        reranker = Reranker(endpoint.url + "/rerank", timeout_seconds=0.2)
        started = time.monotonic()
        assert reranker.rerank("q", DOCUMENTS, top_n=2) == [(0, 0.0), (1, 0.0)]
        assert time.monotonic() - started < 1.2


def test_an_unreachable_reranker_leaves_the_order() -> None:
    from tests.conftest import free_port

    reranker = Reranker(f"http://127.0.0.1:{free_port()}/rerank", timeout_seconds=1.0)
    assert reranker.rerank("q", DOCUMENTS) == [(i, 0.0) for i in range(len(DOCUMENTS))]
    assert reranker.rerank("q", [], top_n=3) == []


def test_off_by_default_and_on_the_nodes_deps_when_configured(tmp_path: Path) -> None:
    assert Reranker.from_settings(Settings()) is None
    with pytest.raises(ConfigurationError, match="ACN_RERANK_URL"):
        Reranker.from_settings(Settings(rerank_url="ftp://127.0.0.1/rerank"))
    with stand_in(by_length) as endpoint:
        app = create_app(make_settings(tmp_path, rerank_url=endpoint.url + "/rerank"))
        runtime = app.extensions["acn"]
        try:
            reranker = runtime.deps("default").reranker
            assert reranker is not None and reranker.rerank("q", DOCUMENTS, 1) == [(1, 1.0)]
        finally:
            runtime.close()
        plain = create_app(make_settings(tmp_path / "plain"))
        try:
            assert plain.extensions["acn"].deps("default").reranker is None
        finally:
            plain.extensions["acn"].close()
