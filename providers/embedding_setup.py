"""The embedder a running pack uses, built from its settings (ACN_EMBEDDER and the ACN_EMBEDDING_* settings)."""

from __future__ import annotations

from pathlib import Path

from common.settings import Settings
from providers.embedders import E5Embedder, Embedder, load_embedder
from providers.openai_embeddings import OpenAIEmbedder


def embedder_from_settings(settings: Settings, cache: Path | None = None) -> Embedder | None:
    """Return the configured embedder, or None for 'none' (BM25 only). cache: see Embedder.use_cache."""
    if settings.embedder == "openai":
        return OpenAIEmbedder.from_settings(settings)
    if settings.embedder == "e5":
        return E5Embedder(threads=settings.embedding_threads)
    return load_embedder(settings.embedder, cache)


def embeds_in_background(settings: Settings, embedder: Embedder | None) -> bool:
    """Whether rows wait for their vectors in the backlog (ACN_EMBEDDING_BACKLOG; auto: unless the embedder is
    cheap enough for the request path)."""
    if embedder is None:
        return False
    if settings.embedding_backlog == "auto":
        return not embedder.inline
    return settings.embedding_backlog == "on"
