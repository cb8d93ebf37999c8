"""Vectors off the request path: rows are written with their text at once, a background thread embeds them later.

Why: e5 takes ~35–90 ms a message passage on these 2 cores, an embeddings endpoint a network round trip; the
request that writes a row must not wait for either. With MemoryRepository(embed_later=True) a row is written
with EMBEDDED 0 and a placeholder vector: BM25 finds it at once, dense search skips it (it filters on EMBEDDED).
This worker then embeds such rows and sets their vector and EMBEDDED 1.

Durable: the backlog is the store itself (EMBEDDED == 0). What this process writes is also queued in memory (no
store scan per row); at start, after a queue overflow, after a failure and, against a server, every
`rescan_seconds`, the worker scans the store for rows still waiting (an earlier process's, another process's).
It starts a batch once rows have stopped arriving and no request has been handled for QUIET_SECONDS (at the latest
MAX_DEFER_SECONDS later), and its store reads outside write_order wait while a request's read runs
(lite/read_priority.py): with Lite the worker's reads are Python in this process, and a scan for waiting rows
costs 0.1-0.7 s at 100k rows, which a search beside it paid (measured at 100k with USE: first search after a restart
274-612 ms with the worker running alongside, 137-147 ms once it waited for them). The embedding itself runs on a
thread of its own at nice 10 (the engine releases the GIL: it costs the requests a core, not the interpreter); the
store work stays on the worker thread at normal priority, since it holds locks the requests need (a thread at nice
10 holding a lock on a loaded machine was descheduled while requests waited).
Vectors are written WRITE_ROWS at a time, each under one short hold of write_order, with the rows re-read before
the hold (read again inside it only if a write of this process came between: MilvusStore.flushes.write_count), and in
the store's background mode: a request waiting for the store's write lock goes first, and these writes do not
make the store flush in the pause after each batch (MilvusStore.background).

Safe against concurrent writers: a vector is written only to a row that still holds the text that was embedded
and still waits (re-read by primary key right before the write's hold of write_order, and read again inside it if
the store's write count for the collection moved meanwhile), and only the vector and the flag are written
(a partial update: Milvus Lite 3, Milvus >= 2.6), so no other field can be set back. Within a process the
re-read, the write and the in-process index update hold the repository's write_order, which every save holds
too. Against a server another process may rewrite the row between the re-read and the write: after writing,
the worker reads the texts again and puts any row whose text changed back in the backlog (a save after that
read writes EMBEDDED 0 itself). Two processes may embed the same row: each writes the same vector, and the
second write is an idempotent repeat. A store without partial updates gets whole rows rewritten under
write_order: safe within one process only, so app.runtime embeds on the request path against such a server.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext, suppress
from typing import Any

from acn.storage.database import EMBEDDED_FIELD, OUTPUT_FIELDS, READS, Filter, Record, client_id, stored_id
from acn.storage.repositories import MemoryRepository

log = logging.getLogger("acn.embedding")
PENDING = Filter("embedded == 0")
MAX_QUEUED = 100_000  # past this the queue is dropped: the store still has every waiting row, a scan finds them
SCAN_ROWS = 512  # rows one scan reads into the queue
MAX_BACKOFF_SECONDS = 60.0
# A batch starts once rows stopped arriving and requests stopped coming for QUIET_SECONDS (a chat's turns are seconds
# apart: the worker embeds between them, not beside a request), or at the latest MAX_DEFER_SECONDS after it could
# have started (under unbroken traffic the backlog still drains).
QUIET_SECONDS = 0.1
MAX_DEFER_SECONDS = 2.0
# Vectors written per hold of write_order (one re-read, one partial upsert, the cache update: ~2-5 ms with 4 rows
# of 384 floats; a batch of 8 in one hold was ~8-18 ms, up to 190 ms at nice 10 on a loaded machine).
WRITE_ROWS = 4
OPTIMISTIC_READS = 3  # re-reads outside write_order before one inside it (see _fill_rows)
Key = tuple[str, str]  # tenant, id


class EmbeddingBacklog:
    """The background worker of one repository: `start`, `notify` (the repository's on_pending), `drain`, `stop`."""

    def __init__(self, repository: MemoryRepository, *, batch: int = 8, rescan_seconds: float = 60.0,
                 nice: int = 10, max_defer: float = MAX_DEFER_SECONDS) -> None:
        if repository.embedder is None:
            raise ValueError("an embedding backlog needs a repository with an embedder")
        self.repository = repository
        self.embedder = repository.embedder
        self.batch = max(1, batch)
        self.rescan_seconds = rescan_seconds
        self.nice = nice
        self.max_defer = max_defer
        self.filled = 0  # vectors written by this worker
        self.embed_seconds = 0.0  # time spent embedding them
        self._queue: OrderedDict[Key, str] = OrderedDict()
        self._condition = threading.Condition()
        self._scan_due = True  # rows an earlier process left waiting
        self._busy = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._backoff = 0.0
        self._last_scan = 0.0
        self._last_notify = 0.0
        self._embedding: ThreadPoolExecutor | None = None  # the niced thread that runs the embedder (start)
        self.locked_reads = 0  # re-reads that had to be made inside write_order (a write came between)
        repository.on_pending = self.notify

    # -- control ---------------------------------------------------------------------------

    def start(self) -> EmbeddingBacklog:
        """Start the worker thread (once)."""
        if self._thread is None:
            self._embedding = ThreadPoolExecutor(1, thread_name_prefix="acn-embed-cpu", initializer=_lower_priority,
                                                 initargs=(self.nice,))
            self._thread = threading.Thread(target=self._run, name="acn-embed", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop after the batch in hand (rows not reached stay waiting in the store, for the next start)."""
        self._stop.set()
        with self._condition:
            self._condition.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
        if self._embedding is not None:
            self._embedding.shutdown(wait=False)

    def notify(self, tenant: str, rows: list[tuple[str, str]]) -> None:
        """Queue rows just written to wait for their vectors (id, text); a newer text of an id replaces the older."""
        with self._condition:
            self._last_notify = time.monotonic()
            for memory_id, content in rows:
                self._queue[(tenant, memory_id)] = content
                self._queue.move_to_end((tenant, memory_id))
            if len(self._queue) > MAX_QUEUED:
                self._queue.clear()
                self._scan_due = True
            self._condition.notify_all()

    def queued(self) -> int:
        """Rows queued in this process (the store may hold more waiting rows until the next scan)."""
        with self._condition:
            return len(self._queue)

    def drain(self, timeout: float = 60.0) -> bool:
        """Wait until nothing is queued, no scan is due and no batch is in hand; True if that happened in time.

        Without a running thread (tests, bench), do the work in this thread.
        """
        if self._thread is None:
            deadline = time.monotonic() + timeout
            while self.run_once():
                if time.monotonic() > deadline:
                    return False
            return True
        deadline = time.monotonic() + timeout
        with self._condition:
            while self._queue or self._scan_due or self._busy:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._stop.is_set():
                    return False
                self._condition.wait(min(remaining, 0.5))
        return True

    # -- work ------------------------------------------------------------------------------

    def run_once(self) -> int:
        """Embed and write one batch; return how many rows it took from the backlog (0: nothing waits)."""
        with self._condition:
            if not self._queue and self._scan_due:
                self._scan_due = False
                scan = True
            else:
                scan = False
        if scan:
            self._scan()
        with self._condition:
            work = [self._queue.popitem(last=False) for _ in range(min(self.batch, len(self._queue)))]
            self._busy = bool(work)
        try:
            if work:
                self._process(work)
            return len(work)
        except BaseException:
            with self._condition:  # back in the queue, at its end: the next batch is tried first
                for key, content in work:
                    self._queue.setdefault(key, content)
            raise
        finally:
            with self._condition:
                self._busy = False
                self._condition.notify_all()

    def _scan(self) -> None:
        """Queue rows the store holds as waiting (up to SCAN_ROWS; another scan follows when that many came)."""
        repository = self.repository
        self._last_scan = time.monotonic()
        with READS.background():  # after any request's read in progress (and not counted as a request's)
            rows = repository.store.query(repository.spec.name, PENDING, fields=["id", "tenant", "content"],
                                          limit=SCAN_ROWS)
        with self._condition:
            for row in rows:
                self._queue.setdefault((str(row["tenant"]), client_id(str(row["id"]))), str(row["content"]))
            if len(rows) >= SCAN_ROWS:
                self._scan_due = True
        if rows:
            log.info("embedding backlog: %d waiting rows found in the store", len(rows))

    def _process(self, work: list[tuple[Key, str]]) -> None:
        started = time.perf_counter()
        texts = [content for _, content in work]
        embedding = self._embedding
        vectors = self.embedder.embed_batch(texts) if embedding is None or threading.current_thread() is not \
            self._thread else embedding.submit(self.embedder.embed_batch, texts).result()
        self.embed_seconds += time.perf_counter() - started
        by_tenant: dict[str, list[tuple[str, str, list[float]]]] = {}
        for ((tenant, memory_id), content), vector in zip(work, vectors, strict=True):
            by_tenant.setdefault(tenant, []).append((memory_id, content, vector))
        for tenant, items in by_tenant.items():
            self.filled += self.fill(tenant, items)

    def fill(self, tenant: str, items: list[tuple[str, str, list[float]]]) -> int:
        """Write each vector (id, the text it embeds, vector) to its row if the row still waits with that text.

        WRITE_ROWS rows at a time, each group in one short hold of write_order (requests that write go between).
        """
        written = 0
        for start in range(0, len(items), WRITE_ROWS):
            if start:
                time.sleep(0)  # let a request thread that waits for write_order take it now
            written += self._fill_rows(tenant, items[start:start + WRITE_ROWS])
        return written

    def _fill_rows(self, tenant: str, items: list[tuple[str, str, list[float]]]) -> int:
        repository, store = self.repository, self.repository.store
        ids = [memory_id for memory_id, _, _ in items]
        collection = repository.spec.name
        with self._background(store):
            written: list[str] | None = None
            if _write_count(store, collection) is not None:
                # Read outside write_order; the read is good inside it if no write of this process came between.
                for _ in range(OPTIMISTIC_READS):
                    seen = _write_count(store, collection)
                    with READS.background():  # not inside write_order, where waiting would hold up writes
                        current = self._current(tenant, ids)
                    _wait_for_writes(store)  # not to hold write_order while a flush holds the store's lock
                    with repository.write_order:
                        if _write_count(store, collection) == seen:
                            written = self._write(tenant, items, current)
                            break
            if written is None:
                self.locked_reads += 1
                _wait_for_writes(store)
                with repository.write_order:
                    written = self._write(tenant, items, self._current(tenant, ids))
        if written and getattr(store, "is_server", False):
            self._recheck(tenant, {memory_id: content for memory_id, content, _ in items if memory_id in written})
        return len(written)

    def _current(self, tenant: str, ids: list[str]) -> dict[str, Record]:
        # By primary key: a `tenant == … and id in …` filter makes Lite scan the collection (0.3-1 s at 100k
        # rows), and this read can happen under write_order, where every save waits for it.
        rows = self.repository.rows_by_id(tenant, ids, [*OUTPUT_FIELDS, EMBEDDED_FIELD])
        return {str(row["id"]): row for row in rows}

    def _write(self, tenant: str, items: list[tuple[str, str, list[float]]], current: dict[str, Record]) -> list[str]:
        """Write the vectors of rows that still wait with the embedded text (call under write_order)."""
        repository, store = self.repository, self.repository.store
        collection = repository.spec.name
        ready = [(memory_id, vector) for memory_id, content, vector in items
                 if memory_id in current and current[memory_id].get(EMBEDDED_FIELD) == 0
                 and current[memory_id]["content"] == content]
        if not ready:
            return []
        # Rows as stored: their primary keys, not the ids clients know (acn/storage/database/memory_rows.py stored_id).
        whole: list[Record] = [{**current[memory_id], "id": stored_id(tenant, memory_id), "dense": vector,
                                EMBEDDED_FIELD: 1} for memory_id, vector in ready]
        try:
            store.update_fields(collection, [{"id": stored_id(tenant, memory_id), "tenant": tenant, "dense": vector,
                                              EMBEDDED_FIELD: 1} for memory_id, vector in ready])
        except NotImplementedError:
            store.upsert(collection, whole)  # whole rows, re-read under write_order: one process only
        repository.vectors_filled(tenant, whole)
        return [memory_id for memory_id, _ in ready]

    @staticmethod
    @contextmanager
    def _background(store: Any) -> Iterator[None]:
        background = getattr(store, "background", None)
        with background() if callable(background) else nullcontext():
            yield

    def _recheck(self, tenant: str, texts: dict[str, str]) -> None:
        """Against a server: put rows another process rewrote between the re-read and the write back in the backlog."""
        store, collection = self.repository.store, self.repository.spec.name
        rows = self.repository.rows_by_id(tenant, list(texts), ["id", "content", EMBEDDED_FIELD])
        changed = [row for row in rows if row["content"] != texts[str(row["id"])] and row.get(EMBEDDED_FIELD) == 1]
        if changed:
            store.update_fields(collection, [{"id": stored_id(tenant, str(row["id"])), "tenant": tenant,
                                              EMBEDDED_FIELD: 0} for row in changed])
            self.notify(tenant, [(str(row["id"]), str(row["content"])) for row in changed])

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._condition:
                if self.rescan_seconds and getattr(self.repository.store, "is_server", False) and \
                        time.monotonic() - self._last_scan >= self.rescan_seconds:
                    self._scan_due = True
                if not self._queue and not self._scan_due:
                    self._condition.wait(self.rescan_seconds or None)
                    continue
            self._wait_for_quiet()
            try:
                self.run_once()
                self._backoff = 0.0
            except Exception as error:  # the rows stay waiting (in the store and the queue): retried after a pause
                self._backoff = min(MAX_BACKOFF_SECONDS, max(1.0, self._backoff * 2))
                log.warning("embedding backlog: a batch failed, retrying in %.0f s: %s", self._backoff,
                            getattr(error, "message", None) or repr(error))
                with self._condition:
                    self._scan_due = True
                self._stop.wait(self._backoff)


    def _wait_for_quiet(self) -> None:
        """Wait until no row arrived and no request ran for QUIET_SECONDS, at most max_defer seconds."""
        deadline = time.monotonic() + self.max_defer
        while not self._stop.is_set():
            idle = READS.idle_seconds()
            now = time.monotonic()
            with self._condition:
                quiet = min(now - self._last_notify, idle)
            if quiet >= QUIET_SECONDS or now >= deadline:
                return
            self._stop.wait(min(QUIET_SECONDS - quiet, deadline - now))


def _lower_priority(nice: int) -> None:
    """Run this thread (only) at the given niceness, so that a request thread wins the CPU over an embedding."""
    with suppress(AttributeError, OSError):  # not Linux, or not allowed: the embedding runs at normal priority
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def _wait_for_writes(store: Any) -> None:
    wait = getattr(store, "wait_for_writes", None)
    if callable(wait):
        wait()


def _write_count(store: Any, collection: str) -> int | None:
    """The store's count of writes to the collection (MilvusStore.flushes.write_count), or None if it keeps none."""
    flushes = getattr(store, "flushes", None)
    return int(flushes.write_count(collection)) if flushes is not None else None
