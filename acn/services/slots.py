"""Process-wide bounds on CPU-heavy work: a fixed number of slots and of callers waiting for one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class WorkSlots:
    """A bounded number of concurrent CPU-heavy compactions per process, and of callers waiting for one.

    A caller waits at most wait_seconds; when `size` callers already wait it is refused at once. So at most
    2 × size request threads are ever taken by compaction: the others stay free for retrieval and assembly.
    """

    def __init__(self, size: int, wait_seconds: float) -> None:
        self.size = size
        self.wait_seconds = wait_seconds
        self._slots = threading.BoundedSemaphore(size)
        self._lock = threading.Lock()
        self._waiting = 0

    @contextmanager
    def held(self) -> Iterator[bool]:
        """Yield True with a slot held, or False when none came free in time (or too many callers wait)."""
        acquired = self._slots.acquire(blocking=False)
        if not acquired:
            with self._lock:
                wait = self._waiting < self.size
                self._waiting += wait
            if wait:
                try:
                    acquired = self._slots.acquire(timeout=self.wait_seconds)
                finally:
                    with self._lock:
                        self._waiting -= 1
        try:
            yield acquired
        finally:
            if acquired:
                self._slots.release()
