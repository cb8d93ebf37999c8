"""The write counters that tell a Lite process's kept objects (parked dedup pools, remembered views) that what they
were built from changed: one counter per owner of a scope, so that a write counts only against what reads it.

Counted per agent before (issue 47): 32 chats of one agent at once, each turn's extracted facts in one session made
every other session's parked dedup pool stale, and each record_turn rebuilt its pool from the session's rows (a
DedupIndex over ~540 rows a turn at turn 300, growing with the chat). A namespace reads its session's own rows, its
user's, its agent's agent scope and its tenant's shared scope (memory_rows.scope_filter): a write to another
session, or to another user's scope, changes none of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from acn.common.models import Memory, Namespace

# (epoch, writes to the agent scope, to the user's scope, to the session's own, to the shared scope)
Stamp = tuple[int, int, int, int, int]


def read_counters(tenant: str, namespace: Namespace,
                  scopes: Sequence[str] | None = None) -> tuple[Hashable | None, ...]:
    """Return the counters of what the namespace reads in these scopes (None: every scope), in the stamp's order;
    None for a scope not read (an object read from some scopes alone goes stale only when those are written)."""
    counters = (("agent", tenant, namespace.agent_id), ("user", tenant, namespace.agent_id, namespace.user_id or ""),
                ("session", tenant, namespace.agent_id, namespace.session_id), ("shared", tenant))
    return tuple(counter if scopes is None or counter[0] in scopes else None for counter in counters)


def row_counter(tenant: str, memory: Memory) -> Hashable:
    """Return the counter a row's write moves (by its scope, as scope_filter reads it)."""
    if memory.scope == "session":
        return ("session", tenant, memory.agent_id, memory.session_id)
    if memory.scope == "user":
        return ("user", tenant, memory.agent_id, memory.user_id or "")
    if memory.scope == "agent":
        return ("agent", tenant, memory.agent_id)
    return ("shared", tenant)


def written_counters(tenant: str, memories: Iterable[Memory]) -> set[Hashable]:
    """Return the counters a saved batch moves, each by one: archived messages move none (no dedup index or
    remembered view holds them)."""
    return {row_counter(tenant, memory) for memory in memories if memory.kind != "turn"}


def moved_stamp(stamp: Stamp, tenant: str, namespace: Namespace, memories: Iterable[Memory],
                scopes: Sequence[str] | None = None) -> Stamp:
    """Return `stamp` as the namespace's stamp in these scopes moves with this batch alone (as ReadCache.after_save
    counts it): an object that already holds the batch stays current; any other write since makes the stamps
    differ."""
    moved = written_counters(tenant, memories)
    epoch, *counts = stamp
    return (epoch, *(count + (counter is not None and counter in moved) for count, counter in
                     zip(counts, read_counters(tenant, namespace, scopes), strict=True)))  # type: ignore[return-value]
