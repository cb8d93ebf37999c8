"""What a request did without: a provider (embedder, reranker) that failed while the request went on.

A search whose query could not be embedded answers from BM25 alone; a reranker that failed leaves the fused order.
The answer is still a 200, so the caller must be told in the response (`degraded`) and the operator in /metrics
(acn_degraded). The part that failed is noted where it fails, deep in the storage or retrieval code, and read by
the node that builds the response: a context variable carries it between them without threading a collector
through every signature. Nothing is noted outside a `collecting` block (a background worker, a test calling a
repository directly).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

UNAVAILABLE = "unavailable"
_NOTES: ContextVar[dict[str, str] | None] = ContextVar("acn_degraded", default=None)


def note(part: str, state: str = UNAVAILABLE) -> None:
    """Record that `part` (dense, rerank) was left out of the current request."""
    notes = _NOTES.get()
    if notes is not None:
        notes[part] = state


@contextmanager
def collecting() -> Iterator[dict[str, str]]:
    """Yield the dict the block's notes land in (nested blocks share the outer one)."""
    outer = _NOTES.get()
    if outer is not None:
        yield outer
        return
    notes: dict[str, str] = {}
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)
