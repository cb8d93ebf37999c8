"""The embedder a running pack uses, built from its settings (ACN_EMBEDDER and the ACN_EMBEDDING_* settings)."""

from __future__ import annotations

from pathlib import Path

from acn.common.settings import Settings
from acn.providers.embedders import E5Embedder, Embedder, load_embedder, use_e5
from acn.providers.openai_embeddings import OpenAIEmbedder


def embedder_from_settings(settings: Settings, cache: Path | None = None) -> Embedder | None:
    """Return the configured embedder, or None for 'none' (BM25 only). cache: see Embedder.use_cache."""
    if settings.embedder == "openai":
        return OpenAIEmbedder.from_settings(settings)
    if settings.embedder == "e5":
        return E5Embedder(threads=settings.embedding_threads)
    if settings.embedder == "use+e5":
        return use_e5(threads=settings.embedding_threads)
    return load_embedder(settings.embedder, cache)


def embeds_in_background(settings: Settings, embedder: Embedder | None) -> bool:
    """Whether rows may wait for their vectors in the backlog (ACN_EMBEDDING_BACKLOG). With `auto` a cheap
    embedder still uses it, for write calls larger than inline_rows allows."""
    if embedder is None:
        return False
    return settings.embedding_backlog in ("on", "auto")


def inline_rows(settings: Settings, embedder: Embedder | None) -> int:
    """Return the largest write call embedded on the request path when the backlog is on (0: none).

    A cheap embedder (USE: ~1 ms a row) keeps small calls inline, so what record_turn or a single memory_write
    stores is found by dense search at once; a bulk import of hundreds of rows would spend most of its time
    embedding (466 vs 1,747 items/s at 1k rows, 100 a call) and goes to the worker instead.
    """
    if embedder is None or settings.embedding_backlog != "auto" or not embedder.inline:
        return 0
    return settings.embedding_inline_max
