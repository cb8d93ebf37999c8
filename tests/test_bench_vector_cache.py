"""bench.vector_cache: passage vectors kept between bench.recall runs, exactly the model's, queries never cached."""

from __future__ import annotations

from pathlib import Path

from acn.providers.embedders import EMBEDDERS, HashEmbedder
from bench.vector_cache import PREFIX, CachedEmbedder, VectorCache, cached_name


class Counting(HashEmbedder):
    inline = False

    def __init__(self) -> None:
        super().__init__(dim=16)
        self.embedded: list[str] = []

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        self.embedded += texts
        return super().embed_batch(texts)


def test_a_second_process_reads_the_same_vectors_without_the_model(tmp_path: Path) -> None:
    texts = ["对账接口的超时设为30秒", "the cat", "对账接口的超时设为30秒", ""]
    first = Counting()
    vectors = CachedEmbedder(first, VectorCache(tmp_path / "v.sqlite")).embed_batch(texts)
    assert first.embedded == ["对账接口的超时设为30秒", "the cat", ""]  # each distinct text once
    assert vectors == HashEmbedder(dim=16).embed_batch(texts)
    again = Counting()
    cached = CachedEmbedder(again, VectorCache(tmp_path / "v.sqlite"))  # a new connection, as a new worker
    assert cached.embed_batch(texts) == vectors and again.embedded == []
    assert cached.embed_query("the cat") == HashEmbedder(dim=16).embed_query("the cat")
    assert not cached.inline and cached.dim == 16  # the product still embeds in the background


def test_cached_names_are_registered_only_with_a_cache(tmp_path: Path) -> None:
    assert cached_name("e5", None) == "e5"
    assert cached_name("hash", tmp_path / "v.sqlite") == "hash"
    assert cached_name("use+e5", tmp_path / "v.sqlite") == PREFIX + "use+e5" and PREFIX + "use+e5" in EMBEDDERS
