"""Requests before background reads, in a process that runs Milvus Lite itself.

Why: Milvus Lite 3 is Python running in this process (its gRPC servicer threads evaluate filters and build rows
under our GIL), so a background read (a session index loading 10k rows: ~0.6 s of Lite work at 10k memories) runs
at the same time as a request only by slowing it down: measured on the first search after a restart, 52-344 ms
with the load alongside, 20-60 ms alone. So the reads of a background thread wait their turn. The first read of a
session index load waits until the request that asked for it has been answered (by the store, meanwhile) and no
request is being handled (the server marks each one); the later ones while a request's store read runs. Each wait
is bounded (PATIENCE): under unbroken traffic a load still goes on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

PATIENCE = 2.0  # seconds a background read waits for its turn at most
# Seconds between the end of the request that asked for a load and the load's first read: the app has returned
# the answer, waitress's main thread still has to write it, and with Lite building rows alongside every switch
# of the interpreter lock costs it up to 5 ms (measured at 100k: the answer reached the client ~200 ms after the
# app returned it, 1-2 ms without the load).
DELIVERY = 0.05


class ReadPriority:
    """Counts requests and the reads of threads not marked background (foreground work); reads of threads marked
    background wait their turn."""

    def __init__(self, patience: float = PATIENCE, delivery: float = DELIVERY) -> None:
        self._patience = patience
        self._delivery = delivery
        self._condition = threading.Condition()
        self._active = 0  # foreground spans running (requests, reads of request threads)
        self._finished = 0  # foreground spans finished, ever
        self._reading = 0  # store reads of foreground threads running
        self._last_end = float("-inf")  # time.monotonic() when a foreground span last finished
        self._local = threading.local()

    def finished(self) -> int:
        """Return how many foreground spans have finished (a mark for `background(after=...)`)."""
        with self._condition:
            return self._finished

    def idle_seconds(self) -> float:
        """Return how long no foreground work has run: 0 while some does, infinity if none ever did."""
        with self._condition:
            return 0.0 if self._active else time.monotonic() - self._last_end

    @contextmanager
    def background(self, after: int | None = None) -> Iterator[None]:
        """Mark the current thread's reads as background ones while inside.

        `after`: a `finished()` mark taken when the work was asked for; the first read then also waits until a
        foreground span finished since that mark (the request that asked, answered by the store meanwhile).
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
        """Wrap one store read: foreground work when a request makes it, made to wait its turn when a background
        thread does."""
        if getattr(self._local, "background", False):
            self._wait_turn()
            yield
            return
        with self._condition:
            self._reading += 1
        try:
            with self.foreground():
                yield
        finally:
            with self._condition:
                self._reading -= 1
                self._condition.notify_all()

    @contextmanager
    def foreground(self) -> Iterator[None]:
        """Count what is inside as foreground work: a whole request (the server wraps each one: ranking and
        rendering after the store's answer compete for the interpreter too), or a read (nested spans count once)."""
        depth = getattr(self._local, "depth", 0)
        self._local.depth = depth + 1
        if depth:
            try:
                yield
            finally:
                self._local.depth = depth
            return
        with self._condition:
            self._active += 1
        try:
            yield
        finally:
            self._local.depth = depth
            with self._condition:
                self._active -= 1
                self._finished += 1
                self._last_end = time.monotonic()
                self._condition.notify_all()

    def give_way(self) -> None:
        """Wait while requests are being handled (PATIENCE at most): a background pass takes its next step between
        them. After a restart the start-up warmer went on loading other sessions while the first request loaded its
        own namespace's index, and the two shared the interpreter (issue 47)."""
        self._wait_while(lambda: self._active > 0, time.monotonic() + self._patience)

    def _wait_turn(self) -> None:
        """Every read waits while a foreground store read runs; the first read of a load first waits for the asking
        request to end, then DELIVERY. (Waiting for whole requests to end starved a load under back-to-back
        searches: the index came seconds later, and the searches until then were the store's.)"""
        after, self._local.after = self._local.after, None
        deadline = time.monotonic() + self._patience
        if after is not None:
            self._wait_while(lambda: self._finished <= after, deadline)
            time.sleep(min(self._delivery, max(0.0, deadline - time.monotonic())))
        self._wait_while(lambda: self._reading > 0, deadline)

    def _wait_while(self, busy: Callable[[], bool], deadline: float) -> None:
        with self._condition:
            while busy():
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._condition.wait(left)


# One per process: the interpreter's lock that Lite's work competes for is the process's.
READS = ReadPriority()

