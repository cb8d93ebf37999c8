"""The store section of `Settings` (acn/common/settings.py composes the sections)."""

from __future__ import annotations

from pydantic import Field

from acn.common.models import StrictModel


class StoreSettings(StrictModel):
    """Where memories live: the Milvus store, its flushes, the session lease and the in-process caches."""

    milvus_uri: str = Field(
        default="./data/memory.db",
        description="Milvus Lite file path (embedded, the default) or http(s)://host:port of a Milvus server.",
    )
    milvus_token: str = Field(default="", description="Token for a Milvus server (user:password or API key).")
    milvus_db: str = Field(default="", description="Milvus database name on a server (empty: the default).")
    collection_prefix: str = Field(
        default="acn", description="Prefix of the Milvus collections this pack creates."
    )
    store_wait_seconds: float = Field(
        default=60.0, ge=0, le=3600,
        description=(
            "At start-up, how long to wait for a Milvus server that does not answer yet: retries with back-off (0.5 s "
            "doubling to 8 s), logging `store not ready; retrying` each time, then `cannot start: …` (exit 2). `0`: "
            "fail at once. A Lite file is never waited for."
        ),
    )
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
            "a session for at most this long; a stalled one's late commit is refused (409 `lease_lost`) when another "
            "request took the session meanwhile, and goes through when nobody did."
        ),
    )
    redis_lock_wait_seconds: float = Field(
        default=10.0, gt=0, le=600,
        description=(
            "How long a write waits for another request's lease on the same session before 503 `session_busy` (with "
            "`Retry-After`)."
        ),
    )
    session_versions_kept: int = Field(
        default=100, ge=2, le=10_000, description="How many working-state versions each session keeps for rollback."
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
        default=768, ge=1,
        description=(
            "With a Lite file, about how many MB the in-process session indexes and parked dedup indexes hold in all "
            "(estimated; least recently used first out). The bound on what the read cache holds however many agents "
            "and memories the process serves; a session or namespace larger than the budget is searched in the store "
            "or indexed per batch. A session of 1,000 number-rich turns with the default embedder takes ~13 MB: the "
            "default holds ~55 of them. Sessions served in turn that do not all fit load again on each turn (several "
            "times slower): size it to the sessions active at once."
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

    @property
    def is_server_uri(self) -> bool:
        """True when milvus_uri names a Milvus server rather than a Lite file."""
        return self.milvus_uri.startswith(("http://", "https://", "tcp://", "grpc://"))
