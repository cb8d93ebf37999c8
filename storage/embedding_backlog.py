"""Vectors off the request path: rows are written with their text at once, a background thread embeds them later.

Why: e5 takes ~35–90 ms a message passage on these 2 cores, an embeddings endpoint a network round trip; the
request that writes a row must not wait for either. With MemoryRepository(embed_later=True) a row is written
with EMBEDDED 0 and a placeholder vector: BM25 finds it at once, dense search skips it (it filters on EMBEDDED).
This worker then embeds such rows and sets their vector and EMBEDDED 1.

Durable: the backlog is the store itself (EMBEDDED == 0). What this process writes is also queued in memory (no
store scan per row); at start, after a queue overflow, after a failure and, against a server, every
`rescan_seconds`, the worker scans the store for rows still waiting (an earlier process's, another process's).
It runs at nice 10 and starts a batch once rows have stopped arriving for QUIET_SECONDS (at the latest
MAX_DEFER_SECONDS later): the request threads keep the CPU and the store lock while they write.

Safe against concurrent writers: a vector is written only to a row that still holds the text that was embedded
and still waits (re-read by primary key right before the write), and only the vector and the flag are written
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

from storage.base import Filter, Record
from storage.memories import MemoryRepository
from storage.memory_rows import EMBEDDED_FIELD, OUTPUT_FIELDS

log = logging.getLogger("acn.embedding")
PENDING = Filter("embedded == 0")
MAX_QUEUED = 100_000  # past this the queue is dropped: the store still has every waiting row, a scan finds them
SCAN_ROWS = 512  # rows one scan reads into the queue
MAX_BACKOFF_SECONDS = 60.0
# A batch starts once rows stopped arriving for QUIET_SECONDS (a chat's turns are seconds apart: the worker embeds
# between them, not beside a request writing), or at the latest MAX_DEFER_SECONDS after it could have started.
QUIET_SECONDS = 0.1
MAX_DEFER_SECONDS = 2.0
Key = tuple[str, str]  # tenant, id


class EmbeddingBacklog:
    """The background worker of one repository: `start`, `notify` (the repository's on_pending), `drain`, `stop`."""

    def __init__(self, repository: MemoryRepository, *, batch: int = 8, rescan_seconds: float = 60.0,
                 nice: int = 10) -> None:
        if repository.embedder is None:
            raise ValueError("an embedding backlog needs a repository with an embedder")
        self.repository = repository
        self.embedder = repository.embedder
        self.batch = max(1, batch)
        self.rescan_seconds = rescan_seconds
        self.nice = nice
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
        repository.on_pending = self.notify

    # -- control ---------------------------------------------------------------------------

    def start(self) -> EmbeddingBacklog:
        """Start the worker thread (once)."""
        if self._thread is None:
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
        rows = repository.store.query(repository.spec.name, PENDING, fields=["id", "tenant", "content"],
                                      limit=SCAN_ROWS)
        with self._condition:
            for row in rows:
                self._queue.setdefault((str(row["tenant"]), str(row["id"])), str(row["content"]))
            if len(rows) >= SCAN_ROWS:
                self._scan_due = True
        if rows:
            log.info("embedding backlog: %d waiting rows found in the store", len(rows))

    def _process(self, work: list[tuple[Key, str]]) -> None:
        started = time.perf_counter()
        vectors = self.embedder.embed_batch([content for _, content in work])
        self.embed_seconds += time.perf_counter() - started
        by_tenant: dict[str, list[tuple[str, str, list[float]]]] = {}
        for ((tenant, memory_id), content), vector in zip(work, vectors, strict=True):
            by_tenant.setdefault(tenant, []).append((memory_id, content, vector))
        for tenant, items in by_tenant.items():
            self.filled += self.fill(tenant, items)

    def fill(self, tenant: str, items: list[tuple[str, str, list[float]]]) -> int:
        """Write each vector (id, the text it embeds, vector) to its row if the row still waits with that text."""
        repository, store = self.repository, self.repository.store
        collection = repository.spec.name
        ids = [memory_id for memory_id, _, _ in items]
        with repository.write_order:
            current = {str(row["id"]): row for row in store.query(
                collection, _rows_of(tenant, ids), fields=[*OUTPUT_FIELDS, EMBEDDED_FIELD], limit=len(ids))}
            ready = [(memory_id, vector) for memory_id, content, vector in items
                     if memory_id in current and current[memory_id].get(EMBEDDED_FIELD) == 0
                     and current[memory_id]["content"] == content]
            if not ready:
                return 0
            whole: list[Record] = [{**current[memory_id], "dense": vector, EMBEDDED_FIELD: 1}
                                   for memory_id, vector in ready]
            try:
                store.update_fields(collection, [{"id": memory_id, "tenant": tenant, "dense": vector,
                                                  EMBEDDED_FIELD: 1} for memory_id, vector in ready])
            except NotImplementedError:
                store.upsert(collection, whole)  # whole rows, re-read under write_order: one process only
            repository.vectors_filled(tenant, whole)
        if getattr(store, "is_server", False):
            self._recheck(tenant, {memory_id: current[memory_id]["content"] for memory_id, _ in ready})
        return len(ready)

    def _recheck(self, tenant: str, texts: dict[str, str]) -> None:
        """Against a server: put rows another process rewrote between the re-read and the write back in the backlog."""
        store, collection = self.repository.store, self.repository.spec.name
        rows = store.query(collection, _rows_of(tenant, list(texts)), fields=["id", "content", EMBEDDED_FIELD],
                           limit=len(texts))
        changed = [row for row in rows if row["content"] != texts[str(row["id"])] and row.get(EMBEDDED_FIELD) == 1]
        if changed:
            store.update_fields(collection, [{"id": row["id"], "tenant": tenant, EMBEDDED_FIELD: 0} for row in changed])
            self.notify(tenant, [(str(row["id"]), str(row["content"])) for row in changed])

    def _run(self) -> None:
        try:  # Linux: this thread only; a request thread then wins the CPU over a batch
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), self.nice)
        except (AttributeError, OSError):
            pass
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
        deadline = time.monotonic() + MAX_DEFER_SECONDS
        while not self._stop.is_set():
            now = time.monotonic()
            with self._condition:
                quiet = now - self._last_notify
            if quiet >= QUIET_SECONDS or now >= deadline:
                return
            self._stop.wait(min(QUIET_SECONDS - quiet, deadline - now))


def _rows_of(tenant: str, ids: list[str]) -> Filter:
    return Filter("tenant == {bt} and id in {bids}", {"bt": tenant, "bids": ids})

