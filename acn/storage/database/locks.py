"""The store client's two locks: writes that let requests go first, and reads shared unless a reload needs them all."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class WriteLock:
    """A re-entrant lock whose background holders (threads inside MilvusStore.background) let requests go first.

    A thread in background mode takes the lock only while no other thread waits for it in request mode; a
    request thread waits only for the holder in hand, never behind a queue of background writes. It also counts
    what it costs (`stats`): how long request threads waited and how long background threads held it.
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._requests_waiting = 0
        self._local = threading.local()
        self._owner_background = False
        self._acquired_at = 0.0
        self.request_waits = 0
        self.request_wait_seconds = 0.0
        self.request_waits_behind_background = 0
        self.request_wait_behind_background_seconds = 0.0
        self.background_holds = 0
        self.background_hold_seconds = 0.0

    def background_thread(self, on: bool) -> bool:
        """Set whether this thread takes the lock in background mode; return the previous setting."""
        previous = self.in_background()
        self._local.background = on
        return previous

    def in_background(self) -> bool:
        return bool(getattr(self._local, "background", False))

    def acquire(self) -> None:
        me = threading.get_ident()
        background = self.in_background()
        with self._condition:
            if self._owner == me:
                self._depth += 1
                return
            if self._owner is None and (background or not self._requests_waiting):
                self._take(me, background)
                return
            started = time.perf_counter()
            behind_background = False
            if not background:
                self._requests_waiting += 1
            try:
                while self._owner is not None or (background and self._requests_waiting):
                    behind_background = behind_background or self._owner_background
                    self._condition.wait()
            finally:
                if not background:
                    self._requests_waiting -= 1
            self._take(me, background)
            if not background:
                waited = time.perf_counter() - started
                self.request_waits += 1
                self.request_wait_seconds += waited
                if behind_background:
                    self.request_waits_behind_background += 1
                    self.request_wait_behind_background_seconds += waited

    def _take(self, me: int, background: bool) -> None:
        self._owner, self._depth, self._owner_background = me, 1, background
        self._acquired_at = time.perf_counter()

    def release(self) -> None:
        with self._condition:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a write lock this thread does not hold")
            self._depth -= 1
            if self._depth:
                return
            if self._owner_background:
                self.background_holds += 1
                self.background_hold_seconds += time.perf_counter() - self._acquired_at
            self._owner = None
            self._condition.notify_all()

    def __enter__(self) -> WriteLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def stats(self) -> dict[str, float]:
        with self._condition:
            return {"request_waits": self.request_waits, "request_wait_seconds": self.request_wait_seconds,
                    "request_waits_behind_background": self.request_waits_behind_background,
                    "request_wait_behind_background_seconds": self.request_wait_behind_background_seconds,
                    "background_holds": self.background_holds,
                    "background_hold_seconds": self.background_hold_seconds}


class SharedLock:
    """Many shared holders at once, or one exclusive holder; a waiting exclusive holder goes first."""

    def __init__(self) -> None:
        self._condition = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._condition:
            while self._exclusive or self._waiting:
                self._condition.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._condition:
                self._shared -= 1
                if not self._shared:
                    self._condition.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._condition:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._condition.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._condition:
                self._exclusive = False
                self._condition.notify_all()
