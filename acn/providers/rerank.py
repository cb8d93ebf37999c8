"""An optional Cohere/Jina-style rerank endpoint (ACN_RERANK_URL), for operators who run a reranker. Off by default.

Protocol: POST {"model", "query", "documents": [str], "top_n", "return_documents": false} with a Bearer key;
the answer's "results" list holds {"index", "relevance_score"} (Cohere, Jina, TEI's /rerank with "score" and
vLLM's /rerank all answer so; "score" is read when "relevance_score" is absent). No quality claim is made here:
whether it helps is for the retrieval code to measure.
"""

from __future__ import annotations

import logging
import math
from typing import Any

from acn.common.errors import PackError, ProviderError
from acn.common.settings import Settings
from acn.providers.http_json import JsonEndpoint

log = logging.getLogger("acn.rerank")
MAX_DOCUMENTS = 1000


class Reranker:
    """`rerank(query, documents, top_n)` -> [(index into documents, score)], best first.

    It never raises: a failure, a timeout or a malformed answer is logged and the documents come back in their
    own order (scores 0.0), so a caller's response never becomes a 5xx because a reranker is down.
    """

    def __init__(self, url: str, *, model: str = "", api_key: str = "", timeout_seconds: float = 3.0,
                 max_concurrent: int = 4, backoff_seconds: float = 0.0, top_n: int = 50) -> None:
        self.model = model
        self.top_n = top_n
        self._endpoint = JsonEndpoint(url, api_key=api_key, timeout_seconds=timeout_seconds, what="rerank endpoint",
                                      setting="ACN_RERANK_URL", max_concurrent=max_concurrent,
                                      backoff_seconds=backoff_seconds)
        self.failures = 0

    @classmethod
    def from_settings(cls, settings: Settings) -> Reranker | None:
        """The configured reranker, or None when ACN_RERANK_URL is empty."""
        if not settings.rerank_url:
            return None
        return cls(settings.rerank_url, model=settings.rerank_model, api_key=settings.rerank_api_key,
                   timeout_seconds=settings.rerank_timeout_seconds, max_concurrent=settings.provider_max_concurrent,
                   backoff_seconds=settings.provider_backoff_seconds, top_n=settings.rerank_top_n)

    def close(self) -> None:
        self._endpoint.close()

    def rerank(self, query: str, documents: list[str], top_n: int | None = None) -> list[tuple[int, float]]:
        """Return up to top_n (index, score) pairs, best first; on any failure the first top_n in their order."""
        top_n = len(documents) if top_n is None else max(0, min(top_n, len(documents)))
        if not documents or not top_n:
            return []
        try:
            return self.rerank_strict(query, documents, top_n)
        except PackError as error:
            self.failures += 1
            log.warning("rerank failed, keeping the original order: %s", error.message)
            return [(index, 0.0) for index in range(top_n)]

    def rerank_strict(self, query: str, documents: list[str], top_n: int) -> list[tuple[int, float]]:
        """As rerank, but raise ProviderError / ProviderTimeoutError instead of falling back."""
        if len(documents) > MAX_DOCUMENTS:
            raise ProviderError(f"rerank: at most {MAX_DOCUMENTS} documents a call")
        payload: dict[str, Any] = {"query": query, "documents": documents, "top_n": top_n, "return_documents": False}
        if self.model:
            payload["model"] = self.model
        return parse_results(self._endpoint.post(payload), len(documents), top_n)


def parse_results(body: Any, count: int, top_n: int) -> list[tuple[int, float]]:
    """Return the answer's (index, score) pairs, best first, at most top_n; ProviderError when malformed."""
    try:
        results = body["results"]
        pairs = [(item["index"], item["relevance_score"] if "relevance_score" in item else item["score"])
                 for item in results]
    except (KeyError, TypeError) as error:
        raise ProviderError("rerank: the answer has no results[].index/relevance_score") from error
    seen: set[int] = set()
    checked: list[tuple[int, float]] = []
    for index, score in pairs:
        if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < count or index in seen:
            raise ProviderError("rerank: an index is out of range or repeated")
        if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
            raise ProviderError("rerank: a score is not a finite number")
        seen.add(index)
        checked.append((index, float(score)))
    checked.sort(key=lambda pair: (-pair[1], pair[0]))
    return checked[:top_n]
