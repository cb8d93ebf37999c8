"""The load-once protocol of a read cache whose entries a slow store query fills while writes keep landing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

K = TypeVar("K")
Q = TypeVar("Q")
R = TypeVar("R")
T = TypeVar("T")


class LoadOnce(Generic[K, Q]):
    """Loads of cache entries by key, one at a time per key, that never install a stale entry.

    The steps, in order: mark the key loading (with an empty queue) and remember the epoch, under the lock;
    query, outside the lock; on failure unmark; then, under the lock again, unmark, and install only when the
    result is not too large (else the key is remembered as overflowing and not loaded again until
    `clear_overflow`) and no invalidation bumped the epoch meanwhile. Writes that land during the query add
    themselves to the key's queue (`queues()`, with the lock held); `install` gets the queue with the result, so
    nothing written during the load is lost. A caller that finds the key loading or overflowing gets None and
    asks the store instead: a second, concurrent load would only race the first.
    """

    def __init__(self, lock: threading.Lock, epoch: Callable[[], int], new_queue: Callable[[], Q]) -> None:
        self._lock = lock
        self._epoch = epoch
        self._new_queue = new_queue
        self._loading: dict[K, Q] = {}
        self._overflow: set[K] = set()

    def queues(self) -> dict[K, Q]:
        """Return the queues of the loads in progress, by key (call with the lock held)."""
        return self._loading

    def busy(self, key: K) -> bool:
        """Return True while the key loads or after it overflowed (call with the lock held)."""
        return key in self._loading or key in self._overflow

    def clear_overflow(self) -> None:
        """Let overflowing keys be loaded again, e.g. after a delete (call with the lock held)."""
        self._overflow.clear()

    def load(self, key: K, query: Callable[[], R], *, overflows: Callable[[R], bool],
             install: Callable[[R, Q], T], installed: Callable[[], T | None] = lambda: None) -> T | None:
        """Run the protocol for one key; return what `install` returned, or None when nothing was installed.

        `installed` is checked under the lock first: an entry another thread installed meanwhile is returned.
        `install` runs with the lock held, so no write lands between the replay of the queue and the install.
        """
        with self._lock:
            found = installed()
            if found is not None or self.busy(key):
                return found
            self._loading[key] = self._new_queue()
            started = self._epoch()
        try:
            result = query()
        except BaseException:
            with self._lock:
                self._loading.pop(key, None)
            raise
        with self._lock:
            queued = self._loading.pop(key)
            if overflows(result):
                self._overflow.add(key)
                return None
            if self._epoch() != started:  # an invalidation (a delete, a failed write) raced the query
                return None
            return install(result, queued)
