"""Requests' store reads before background ones, in a process that runs Milvus Lite itself.

Why: Milvus Lite 3 is Python running in this process (its gRPC servicer threads evaluate filters and build rows
under our GIL), so a background read (a session index loading 10k rows: ~0.6 s of Lite work at 10k memories) runs
at the same time as a request's search only by slowing it down: measured on the first search after a restart,
52-344 ms with the load alongside, 20-60 ms alone. So a background thread's reads wait their turn: none starts while
a request's read is running, and the first one of a load also waits for the read of the request that asked for it
(that request's search is what the store answers while the index loads). Each wait is bounded (PATIENCE): under
unbroken traffic a load still goes on, one read at a time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

PATIENCE = 2.0  # seconds a background read waits for its turn at most
QUIET = 0.005  # seconds without a request's read before a load's first read (a search may read twice: text, dense)


class ReadPriority:
    """Counts the reads of request threads; reads of threads marked background wait until none is running."""

    def __init__(self, patience: float = PATIENCE, quiet: float = QUIET) -> None:
        self._patience = patience
        self._quiet = quiet
        self._condition = threading.Condition()
        self._active = 0  # request reads running
        self._finished = 0  # request reads finished, ever
        self._last_end = 0.0
        self._local = threading.local()

    def finished(self) -> int:
        """Return how many request reads have finished (a mark for `background(after=...)`)."""
        with self._condition:
            return self._finished

    @contextmanager
    def background(self, after: int | None = None) -> Iterator[None]:
        """Mark the current thread's reads as background ones while inside.

        `after`: a `finished()` mark taken when the work was asked for; the first read then also waits until a
        request read finished since that mark (the asking request's own read, which comes right after it asks).
        """
        self._local.background = True
        self._local.after = after
        try:
            yield
        finally:
            self._local.background = False
            self._local.after = None

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Wrap one store read: counted when a request makes it, made to wait its turn when a background one."""
        if getattr(self._local, "background", False):
            self._wait_turn()
            yield
            return
        with self._condition:
            self._active += 1
        try:
            yield
        finally:
            with self._condition:
                self._active -= 1
                self._finished += 1
                self._last_end = time.monotonic()
                self._condition.notify_all()

    def pause(self) -> None:
        """Between two steps of background work (a loading index tokenizing its rows): wait while a request's
        read runs, as a background read would (no wait on other threads)."""
        if getattr(self._local, "background", False):
            self._wait_turn()

    def _wait_turn(self) -> None:
        after, self._local.after = self._local.after, None
        deadline = time.monotonic() + self._patience
        with self._condition:
            while True:
                now = time.monotonic()
                if now >= deadline:
                    return
                if self._active:
                    self._condition.wait(deadline - now)
                    continue
                if after is None:
                    return
                if self._finished <= after:  # the asking request has not read yet
                    self._condition.wait(deadline - now)
                    continue
                quiet_left = self._last_end + self._quiet - now
                if quiet_left <= 0:
                    return
                self._condition.wait(min(quiet_left, deadline - now))


# One per process: the interpreter's lock that Lite's work competes for is the process's.
READS = ReadPriority()
