"""Bounds on compaction work: how much one request may compact, and how many compactions run at once."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from common.errors import TooMuchWorkError
from common.models import Message


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


def message_chars(messages: list[Message]) -> int:
    """Return the characters of message text compaction reads (tool calls are archived, not compacted)."""
    return sum(len(message.content) for message in messages)


def check_work(messages: list[Message], *, max_messages: int, max_chars: int, field: str = "messages") -> None:
    """Refuse (422 too_much_work) messages that are more than one request may have compacted.

    Compaction is linear in its input, but a request must stay a bounded amount of CPU: beyond the cap a caller
    splits its history (or records it turn by turn, which compacts as it goes).
    """
    problems = []
    if len(messages) > max_messages:
        problems.append(f"{field}: {len(messages)} messages is more than one request may compact ({max_messages}, "
                        "ACN_MAX_COMPACT_MESSAGES); send fewer at a time")
    chars = message_chars(messages)
    if chars > max_chars:
        problems.append(f"{field}: {chars} characters of text is more than one request may compact ({max_chars}, "
                        "ACN_MAX_COMPACT_CHARS); send fewer at a time")
    if problems:
        raise TooMuchWorkError("; ".join(problems), problems)
