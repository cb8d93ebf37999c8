"""The ids of a small collection's rows that may exist, listed once at start, so that an id not listed is known
absent without a read (issue 33).

On a Lite file this process is the only writer: after one read of a collection of heads (a row per session, agent
or tenant), every id written later is added before its write, and an id not held is certainly absent. A brand-new
session's first call then makes no primary-key read (~4 ms each at a million rows: as much as a warm assemble).
Against a server another replica may write any row: nothing is listed there (`enabled` False), and absence is read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable

from acn.storage.database import Record

LISTED_IDS = 262_144  # ids held at most (~120 B each); beyond, the list is dropped and absence is read by key
log = logging.getLogger("acn.store")


class ListedIds:
    """Ids that may exist; trusted (`absent`) once `listed` is set, i.e. once the start-up list was read whole."""

    def __init__(self, *, enabled: bool, what: str, limit: int = LISTED_IDS) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] | None = set() if enabled else None
        self._what = what
        self._limit = limit
        self.listed = threading.Event()

    @property
    def enabled(self) -> bool:
        return self._ids is not None

    def add(self, ids: Iterable[str]) -> None:
        """Hold ids about to be written (before the write: a reader in between reads the store, as without a list)."""
        with self._lock:
            if self._ids is not None:
                self._ids.update(ids)

    def absent(self, row_id: str) -> bool:
        """Return True when the id is certainly absent: the list is whole and does not hold it."""
        with self._lock:
            return self.listed.is_set() and self._ids is not None and row_id not in self._ids

    def load(self, read: Callable[[], list[Record]]) -> None:
        """Read the ids of every row (`read`, off the request path) and trust the list; too many drop it. A
        failure leaves it untrusted (absence read by key, as before)."""
        try:
            rows = read()
            with self._lock:
                if self._ids is None:
                    return
                if len(rows) + len(self._ids) > self._limit:
                    self._ids = None
                    log.info("more than %d %s: absence is read by key", self._limit, self._what)
                    return
                self._ids.update(str(row["id"]) for row in rows)
            self.listed.set()
        except Exception:  # only a shortcut: reads by key answer meanwhile
            log.exception("listing %s failed", self._what)
