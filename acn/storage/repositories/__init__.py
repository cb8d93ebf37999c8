"""The repositories room: memories, sessions and memory heads over the database room's store interface.

Its door is this module; the pipelines, nodes and inspector import only from here:
- `MemoryRepository` (reads, searches and writes of a tenant's memories, with `queries`, the named reads the
  pipelines ask, and `kept`, what is kept in process between calls), `SessionRepository` (versioned session
  snapshots under a lease), the start-up `carry_over` between embedders and `open_coordinator` (Redis leases);
- the vocabulary the pipelines share with them: `Scored` candidates, ids (`new_memory_id`, `SCOPED_ID_CHARS`),
  `NO_TURN`, `QUERY_WINDOW`, `scope_key`, `user_group` and `user_turns_group` (a user's memories, their archive),
  a write `Stamp` and the sizes of what is kept.
"""

from acn.storage.database import (
    CACHED_INDEXES,
    CACHED_POOLS,
    NO_TURN,
    QUERY_WINDOW,
    SCOPED_ID_CHARS,
    SHARED_KEPT,
    Scored,
    Stamp,
    new_memory_id,
    user_group,
    user_turns_group,
)
from acn.storage.repositories.coordination import open_coordinator
from acn.storage.repositories.memories import MemoryRepository
from acn.storage.repositories.memory_queries import scope_key
from acn.storage.repositories.row_moves import carry_over, scope_legacy_ids
from acn.storage.repositories.sessions import SessionRepository

__all__ = [
    "CACHED_INDEXES", "CACHED_POOLS", "MemoryRepository", "NO_TURN", "QUERY_WINDOW", "SCOPED_ID_CHARS",
    "SHARED_KEPT", "Scored", "SessionRepository", "Stamp", "carry_over", "new_memory_id", "open_coordinator",
    "scope_key", "scope_legacy_ids", "user_group", "user_turns_group",
]
