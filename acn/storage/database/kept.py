"""What a memory repository keeps in process between calls, for the pipelines: the door to that plumbing.

On a Lite file (one writer) objects built from an agent's memories, such as a write batch's dedup pool, are parked
against the read cache's write counters and views are remembered until a write could change them
(acn/storage/database/lite/read_cache.py). Against a server other processes write too: nothing is parked, views are
computed every call, and the last few dedup pools are kept for a caller that brings them up to date itself
(memory.pool.Pool.load_shared).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from acn.common.models import Memory, Namespace
from acn.storage.database.lite.read_cache import ReadCache
from acn.storage.database.lite.write_counters import Stamp, moved_stamp

T = TypeVar("T")
SHARED_KEPT = 64  # dedup pools kept against a server (Kept.keep_shared)


class Kept:
    """Objects and views kept between calls, checked against the write counters of what they were built from."""

    def __init__(self, cache: ReadCache | None) -> None:
        self._cache = cache
        self._lock = threading.Lock()
        self._shared: OrderedDict[Hashable, Any] = OrderedDict()  # see take_shared
        # Parked objects and remembered views exist only on a Lite file (a read cache): elsewhere they are not
        # kept, and a caller need not work out a key for them.
        self.remembers = cache is not None

    def stamp(self, tenant: str, namespace: Namespace, scopes: Sequence[str] | None = None) -> Stamp:
        """Return the write counters of what a namespace reads in these scopes (None: all; ReadCache.stamp,
        acn/storage/database/lite/write_counters.py)."""
        return self._cache.stamp(tenant, namespace, scopes) if self._cache is not None else (0, 0, 0, 0, 0)

    @staticmethod
    def moved(stamp: Stamp, tenant: str, namespace: Namespace, written: Sequence[Memory],
              scopes: Sequence[str] | None = None) -> Stamp:
        """Return the namespace's stamp as it moves with this batch alone (for an object that holds the batch)."""
        return moved_stamp(stamp, tenant, namespace, written, scopes)

    def park(self, tenant: str, namespace: Namespace, key: Hashable, value: Any, stamp: Stamp,
             scopes: Sequence[str] | None = None) -> None:
        """Keep an object built from a namespace's memories in these scopes (None: all) as of `stamp` (e.g. a batch
        writer's dedup index).

        `unpark` hands it back only while nothing it depends on was written since; against a server nothing
        is kept.
        """
        if self._cache is not None:
            self._cache.park(tenant, namespace, key, value, stamp, scopes)

    def unpark(self, tenant: str, namespace: Namespace, key: Hashable,
               scopes: Sequence[str] | None = None) -> Any | None:
        """Take back a parked object if nothing it depends on was written since it was parked (it is removed)."""
        return self._cache.unpark(tenant, namespace, key, scopes) if self._cache is not None else None

    def take_shared(self, key: Hashable) -> Any | None:
        """Take back an object kept by keep_shared (against a server: other processes write too, so the caller
        brings it up to date itself; see memory.pool.Pool.load_shared)."""
        with self._lock:
            return self._shared.pop(key, None)

    def keep_shared(self, key: Hashable, value: Any) -> None:
        """Keep an object for take_shared (the SHARED_KEPT most recent; a delete in this process drops them all)."""
        with self._lock:
            self._shared[key] = value
            self._shared.move_to_end(key)
            while len(self._shared) > SHARED_KEPT:
                self._shared.popitem(last=False)

    def view(self, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until a write that could change it (supersede, update, delete).

        Only for views that inserting brand-new memories cannot change, such as "which values were superseded".
        """
        return self._cache.view(key, compute) if self._cache is not None else compute()

    def agent_view(self, tenant: str, namespace: Namespace, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until a memory the namespace reads is written (Lite only:
        ReadCache.agent_view); against a server, computed every call."""
        return self._cache.agent_view(tenant, namespace, key, compute) if self._cache is not None else compute()

    def absent_archive_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str]) -> set[str]:
        """Return the ids among `ids` that the session's archive certainly does not hold (Lite only).

        Those can be inserted; the rest must be upserted. Inserting skips the upsert's primary-key lookup,
        whose cost grows with the collection (a retried turn rewrites rows that may exist: those are upserted).
        """
        return self._cache.absent_archive_ids(tenant, namespace, ids) if self._cache is not None else set()

    def forget_all(self) -> None:
        """Drop everything kept (rows were deleted or written behind the cache's back, or a write failed)."""
        with self._lock:
            self._shared.clear()
        if self._cache is not None:
            self._cache.forget_all()
