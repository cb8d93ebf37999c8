"""Prometheus metrics: per-node traffic and latency, errors by code, and the context-quality signals.

Three things tell whether context management works in production: the compression ratio of each compaction
(healthy between 0.1 and 0.3: higher saves little, lower loses detail), the retrieval hit rate (share of
retrieved memories that made it into a context) and forgetting. The first two are histograms here; numbers
restored by the verifier count how often an engine dropped a number.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SHARE_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.0)
# What assemble leaves out to keep its output readable and valid (the `reason` of a `dropped` entry starts with
# one of these); each is counted in acn_assemble_repairs.
UNREADABLE_ROW = "stored row cannot be read"
ORPHAN_TOOL_MESSAGE = "tool message without its call"
UNANSWERED_TOOL_CALL = "tool call without its result"
REPAIRS = {UNREADABLE_ROW: "unreadable_row", ORPHAN_TOOL_MESSAGE: "orphan_tool_message",
           UNANSWERED_TOOL_CALL: "unanswered_tool_call"}


class Metrics:
    """One registry per app (tests build many apps in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("acn_requests", "Requests by route and status.", ["route", "status"],
                                registry=self.registry)
        self.latency = Histogram("acn_request_seconds", "Request latency by route.", ["route"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.errors = Counter("acn_errors", "Error responses by stable code.", ["code"], registry=self.registry)
        self.compaction_ratio = Histogram("acn_compaction_ratio", "tokens_after / tokens_before per compaction.",
                                          buckets=SHARE_BUCKETS, registry=self.registry)
        self.numbers_restored = Counter("acn_numbers_restored", "Numbers the verifier put back into a segment.",
                                        registry=self.registry)
        self.amnesia_probes = Counter("acn_amnesia_probes", "Amnesia probes checked on assemble, by result.",
                                      ["result"], registry=self.registry)
        self.retrieval_hit_rate = Histogram(
            "acn_retrieval_hit_rate", "Share of retrieved memories that made it into an assembled context.",
            buckets=SHARE_BUCKETS, registry=self.registry)
        self.assemble_repairs = Counter(
            "acn_assemble_repairs", "What assemble left out to stay readable and valid: unreadable stored rows, "
            "tool messages without their call, tool calls without their result.", ["what"], registry=self.registry)
        self.degraded = Counter(
            "acn_degraded", "Responses that went without a provider which failed (dense: the query was not "
            "embedded, BM25 alone; rerank: the fused order kept), by node and part.", ["node", "part"],
            registry=self.registry)
        self.skipped_rows = Counter(
            "acn_stored_rows_skipped", "Stored rows memory_retrieve left out because a field is outside the "
            "stored-row bounds (acn/common/stored.py; assemble counts its own in acn_assemble_repairs).",
            registry=self.registry)

        self.auth_events = Counter(
            "acn_auth_failures", "Wrong API keys (event=failed) and requests refused while their address waits "
            "(event=throttled), by where the key was presented (api_key, sign_in).", ["event", "where"],
            registry=self.registry)

        self.mcp_calls = Counter(
            "acn_mcp_tool_calls", "MCP tools/call requests at /mcp by tool and outcome (ok, or the error code); "
            "each also counts in acn_requests under route /mcp.", ["tool", "outcome"], registry=self.registry)

        self.embedding_backlog = Gauge(
            "acn_embedding_backlog", "Rows this process has queued for their vectors (ACN_EMBEDDING_BACKLOG); "
            "a steady rise means writes outpace the embedder.", registry=self.registry)
        self.embedded_rows = Gauge("acn_embedded_rows", "Vectors this process's embedding worker has written.",
                                   registry=self.registry)

        self.store_lock_wait = Gauge(
            "acn_store_write_lock_wait_seconds", "Total time requests waited for the store's write lock (Milvus "
            "Lite writes one at a time; a flush holds it too).", registry=self.registry)
        self.store_lock_waits_behind_background = Gauge(
            "acn_store_write_lock_waits_behind_background", "Requests that waited for the store's write lock while "
            "background work (the flusher, the embedding worker's vector writes) held it.", registry=self.registry)

    def observe_auth(self, event: str, where: str) -> None:
        """Count a wrong key or a throttled request (acn/app/key_guard.py)."""
        self.auth_events.labels(event=event, where=where).inc()

    def observe_mcp_call(self, tool: str, outcome: str) -> None:
        """Count one MCP tool call (acn/app/mcp_tools.py): tool is a served tool's name or "unknown"."""
        self.mcp_calls.labels(tool=tool, outcome=outcome).inc()

    def watch_store(self, lock_stats: Callable[[], dict[str, float]]) -> None:
        """Read the store's write-lock counters (MilvusStore.lock_stats) at each scrape."""
        self.store_lock_wait.set_function(lambda: lock_stats()["request_wait_seconds"])
        self.store_lock_waits_behind_background.set_function(
            lambda: lock_stats()["request_waits_behind_background"])

    def watch_backlog(self, queued: Callable[[], int], filled: Callable[[], int]) -> None:
        """Read the embedding backlog's size and progress at each scrape."""
        self.embedding_backlog.set_function(queued)
        self.embedded_rows.set_function(filled)

    def observe_request(self, route: str, status: int, seconds: float) -> None:
        """Count one request and its latency."""
        self.requests.labels(route=route, status=str(status)).inc()
        self.latency.labels(route=route).observe(seconds)

    def observe_error(self, code: str) -> None:
        self.errors.labels(code=code).inc()

    def observe_result(self, node: str, result: BaseModel) -> None:
        """Record the quality signals a node's response carries (read off the model: no dump per request)."""
        compaction = getattr(result, "compaction", None) if node == "record_turn" else result if node == "compact" \
            else None
        stats = getattr(compaction, "stats", None)
        if getattr(compaction, "compacted", False) and stats is not None and stats.tokens_before:
            self.compaction_ratio.observe(stats.tokens_after / stats.tokens_before)
            self.numbers_restored.inc(stats.numbers_restored)
        for part in getattr(result, "degraded", None) or {}:
            self.degraded.labels(node=node, part=part).inc()
        if node == "memory_retrieve":
            self.skipped_rows.inc(len(getattr(result, "dropped", None) or []))
        if node == "assemble":
            kept = sum(1 for s in getattr(result, "sources", []) if s.layer == "memory")
            dropped = sum(1 for d in getattr(result, "dropped", []) if d.layer == "memory")
            if kept + dropped:
                self.retrieval_hit_rate.observe(kept / (kept + dropped))
            for entry in getattr(result, "dropped", []):
                what = next((label for prefix, label in REPAIRS.items() if entry.reason.startswith(prefix)), None)
                if what is not None:
                    self.assemble_repairs.labels(what=what).inc()
            for present in (getattr(result, "probes", None) or {}).values():
                self.amnesia_probes.labels(result="kept" if present else "forgotten").inc()

    def render(self) -> bytes:
        """Return the Prometheus text exposition."""
        return generate_latest(self.registry)
