"""When a store's writes are flushed: a pause of a Lite file's writers, a count of unflushed rows, a timer.

Normally the background flusher writes segments while the store is quiet (between turns), off the request path; a
writer that never pauses flushes a collection inline once enough of its rows are pending, since searches over many
unflushed rows are slow (STORAGE.md #5). After a background flush of a Lite file it hands malloc's free pages back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from acn.storage.database.locks import SharedLock, WriteLock

log = logging.getLogger("acn.store")

# A Lite file is flushed once requests' writes pause this long (a chat's turns are seconds apart). Flushing less often
# at pauses (no sooner than 2 s after the last flush) was tried: the flush then started at any point of the pause,
# often just before the next turn, and requests waited more (lock-wait share 10-15 % vs 0.1-10 %, turns 0.5 s apart).
QUIET_SECONDS = 0.2
# Lite frees what a flush moved out of its memtable and WAL buffers, but malloc keeps the pages: after a background
# flush the flusher hands them back (malloc_trim), no more often than this (a trim walks every arena: ~0.5-5 ms,
# tens of ms over a fragmented heap; it holds no lock of ours) ...
TRIM_INTERVAL_SECONDS = 2.0
# ... and again for this long after the flush: Lite compacts segments and builds their indexes on a worker of its own
# once a flush has returned, and frees the merged inputs later (5,000 agents: +77 MB at 4,000, +108 MB at 5,000
# with a trim only right after each flush).
TRIM_SETTLE_SECONDS = 10.0


class Flushes:
    """One store's unflushed writes and the flusher thread that makes them durable and fast to search.

    Every method but `start`, `stop` and the loop runs under the store's write lock (the caller holds it).
    """

    def __init__(self, *, is_server: bool, flush_every: int, flush_every_unsearched: int, flush_interval: float,
                 trim: Callable[[], bool] | None, write_lock: WriteLock, flush_gate: SharedLock | None,
                 flush_one: Callable[[str], None], connected: Callable[[], bool]) -> None:
        self._is_server = is_server
        self._flush_every = flush_every
        # A Lite collection nothing searched since its last flush waits for this many writes instead: what an
        # unflushed row costs is paid by searches (STORAGE.md #5), while a Lite flush (segment files, manifest,
        # then a compaction of the small segments) costs a bulk writer nearly as much for 200 rows as for 1,000.
        self._flush_every_unsearched = max(flush_every, flush_every_unsearched)
        self.searched: set[str] = set()  # Lite collections searched since their last flush (the store adds)
        self._flush_interval = flush_interval
        self._write_lock = write_lock
        self._flush_gate = flush_gate
        self._flush_one = flush_one
        self._connected = connected
        self._pending: dict[str, int] = {}  # unflushed writes per collection (changed under the write lock)
        self.unflushed = 0  # their sum, which the flusher thread reads without the lock
        self._requests_unflushed = 0  # those written outside `background`: only they make a pause flush due
        self._writes: dict[str, int] = {}  # writes per collection (write_count)
        self._last_write = 0.0
        # A server's timer counts from the last flush: a first write after a quiet spell is flushed at once. Counted
        # from the oldest unflushed write instead, a Milvus Lite server stopped within flush_interval of an
        # acknowledged write came back unable to load its collection (load_collection waited for ever:
        # tests/test_durability.py::test_a_stopped_milvus_server_is_503_then_recovers_without_restart). A Lite
        # file's counts from the oldest unflushed write, and flushes when requests' writes pause (_flush_due).
        self._last_flush = time.monotonic()
        self._oldest_unflushed = 0.0  # when the oldest write not yet flushed was made (0: none)
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        # Only with a Lite file: that is where the engine's freed memory is this process's.
        self._trim = trim if not is_server else None
        self._last_trim = 0.0
        self._trim_until = 0.0  # trims go on until then (the last background flush + TRIM_SETTLE_SECONDS)
        self.trims = 0  # trims made and the seconds they took (tests and benchmarks read them)
        self.trim_seconds = 0.0

    def start(self) -> None:
        """Start the periodic flusher."""
        self._flusher = threading.Thread(target=self._flush_loop, name="acn-flusher", daemon=True)
        self._flusher.start()

    def stop(self) -> None:
        """Stop the periodic flusher (the store flushes once more as it closes)."""
        self._stop.set()

    def unflushed_in(self, collection: str) -> int:
        """Writes to one collection not yet flushed to segments."""
        return self._pending.get(collection, 0)

    def write_count(self, collection: str) -> int:
        """Writes made to a collection (see MilvusStore.write_count)."""
        return self._writes.get(collection, 0)

    def written(self, collection: str, count: int) -> None:
        """Count a write of `count` rows; flush the collection inline once enough of them are pending.

        Per collection: a turn writes to two, and flushing each at its own count costs a request one flush, not both.
        """
        pending = self._pending.get(collection, 0) + count
        self._pending[collection] = pending
        if not self.unflushed:
            self._oldest_unflushed = time.monotonic()
        self.unflushed += count
        self._writes[collection] = self._writes.get(collection, 0) + 1
        if not self._write_lock.in_background():
            self._requests_unflushed += count
            self._last_write = time.monotonic()
        if pending >= self._threshold(collection):
            self.flush_locked([collection])

    def _threshold(self, collection: str) -> int:
        """Return the unflushed writes at which a write flushes the collection inline (a server: flush_every; a Lite
        file: flush_every once the collection was searched since its last flush, else flush_every_unsearched)."""
        if self._is_server or collection in self.searched:
            return self._flush_every
        return self._flush_every_unsearched

    def flush_locked(self, collections: list[str] | None = None) -> None:
        """Flush the given collections (by default every one written since its last flush)."""
        if not self._connected():
            return
        self._flush_collections(list(self._pending) if collections is None else collections)
        if not self.unflushed:
            self._requests_unflushed = 0
        if collections is None:
            self._last_flush = time.monotonic()

    def _flush_collections(self, names: list[str]) -> None:
        if self._flush_gate is None:
            self._flush_each(names)
            return
        with self._flush_gate.exclusive():
            self._flush_each(names)

    def _flush_each(self, names: list[str]) -> None:
        for name in names:
            count = self._pending.get(name, 0)
            if count:
                self.searched.discard(name)  # before: a search during the flush counts for the next one
                self._flush_one(name)  # a failure leaves the count pending: the flusher retries
            self._pending.pop(name, None)
            self.unflushed -= count

    def _flush_loop(self) -> None:
        tick = min(QUIET_SECONDS / 2, self._flush_interval)
        while not self._stop.wait(tick):
            if self._flush_due(time.monotonic()):
                try:
                    self._flush_in_background()
                except Exception:  # a failed background flush is retried next tick; writes stay in the WAL
                    log.warning("periodic flush failed", exc_info=True)
                    continue
                self._trim_until = time.monotonic() + TRIM_SETTLE_SECONDS
            self._trim_after_flush(time.monotonic())

    def _trim_after_flush(self, now: float) -> None:
        """Return the pages malloc kept after a flush to the system (outside every lock; at most every 2 s, until
        TRIM_SETTLE_SECONDS after the last background flush)."""
        if self._trim is None or now > self._trim_until or now - self._last_trim < TRIM_INTERVAL_SECONDS:
            return
        self._last_trim = now
        started = time.perf_counter()
        self._trim()
        self.trim_seconds += time.perf_counter() - started
        self.trims += 1

    def _flush_in_background(self) -> None:
        """Flush one collection per hold of the write lock, each after any request waiting for the lock."""
        previous = self._write_lock.background_thread(True)
        try:
            for name in list(self._pending):
                with self._write_lock:
                    self.flush_locked([name])
            with self._write_lock:
                self.flush_locked()  # what was written meanwhile, and the time of this flush
        finally:
            self._write_lock.background_thread(previous)

    def _flush_due(self, now: float) -> bool:
        """Flush every flush_interval; with a Lite file also as soon as requests' writes pause for QUIET_SECONDS.

        A real server seals segments itself and dislikes frequent flushes (small segments): timer only.
        """
        if not self.unflushed:
            return False
        if self._is_server:
            return now - self._last_flush >= self._flush_interval
        # A Lite file: not while a request is still writing (a record_turn writes four or five times in a few ms)
        # unless its oldest unflushed write is flush_interval old. Timed from the last flush, the first write after
        # a quiet spell made the flush due at once, and the request's next write waited for it behind the write
        # lock (issue 47: a restarted process's first record_turn, ~300 ms). A server keeps that timer (above).
        if now - self._oldest_unflushed >= self._flush_interval:
            return True
        return self._requests_unflushed > 0 and now - self._last_write >= QUIET_SECONDS
