"""MemoryStore over pymilvus: one code path for a Milvus Lite file and a Milvus server URI."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

from pymilvus import DataType, Function, FunctionType, MilvusClient
from pymilvus.client import entity_helper
from pymilvus.exceptions import MilvusException

from acn.common.errors import StoreUnavailableError
from acn.storage.allocator import trim_free_memory
from acn.storage.base import CollectionSpec, Filter, Hit, MemoryStore, Record
from acn.storage.lite.column_insert import ColumnInsert
from acn.storage.lite.read_priority import READS
from acn.storage.locks import SharedLock, WriteLock

log = logging.getLogger("acn.store")

# The portable jieba analyzer: same ranking on Lite 3 and the C++ engine ({"type": "chinese"} is
# rejected by Lite 3). See STORAGE.md.
ANALYZER = {"tokenizer": "jieba", "filter": ["lowercase", "cnalphanumonly"]}
# Text that is already tokens (acn/storage/sealed.py writes lower-case base32 hashes separated by spaces). Milvus's
# "whitespace" tokenizer would say it best, but Lite 3.2.2 knows only "standard" and "jieba"; "standard" splits
# on non-word characters, and a token of [a-z2-7] is one word on both engines.
ANALYZERS = {"jieba": ANALYZER, "hashed": {"tokenizer": "standard"}}
MAX_VARCHAR = 65535
# Lite accepts limits real Milvus rejects; keep limit + offset within what servers allow.
MAX_WINDOW = 16384
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
# How long a start waits for another replica's concurrent creation of the same collection to become visible.
ENSURE_RACE_SECONDS = 30.0
# How long any error preparing a collection is retried before it counts (the winner may not be visible yet).
ENSURE_RETRY_SECONDS = 3.0
# gRPC keepalive that every store accepts. pymilvus pings every 10 s even with no call in flight; a Milvus server
# (Go: keepalive.EnforcementPolicy{MinTime: 5s, PermitWithoutStream: true}) allows that, but Milvus Lite's server
# (grpcio with its defaults: no pings without calls, at most one per 5 min, 2 strikes) answers the third idle ping
# with GOAWAY too_many_pings: after ~30-45 s of quiet, the next call met a dying connection. Ping only while a
# call is in flight, and no more often than the strictest server allows; an idle connection is re-established by
# the next call (grpc.enable_retries stays on).
GRPC_OPTIONS: dict[str, Any] = {
    "grpc.keepalive_time_ms": 300_000,
    "grpc.keepalive_timeout_ms": 20_000,
    "grpc.keepalive_permit_without_calls": 0,
    "grpc.http2.max_pings_without_data": 2,
}
# How long one connection attempt waits for a server's channel to be ready (pymilvus's own default is 10 s).
CONNECT_TIMEOUT = 10.0
# Back-off between attempts to reach a Milvus server that is not up yet (Settings.store_wait_seconds bounds it).
RETRY_FIRST_DELAY = 0.5
RETRY_MAX_DELAY = 8.0
# Fields whose equality filters a Milvus server answers from an INVERTED index instead of a scan of the partition,
# made with a new collection (docs/storage.md, "On a Milvus server"). Not on a Lite file: Lite 3.2.2 scans every
# row whatever the index.
SERVER_INDEXED = ("agent_id", "session_id", "scope", "kind", "row")
_DTYPES = {"varchar": DataType.VARCHAR, "int64": DataType.INT64, "float": DataType.FLOAT, "json": DataType.JSON}
T = TypeVar("T")


def skip_client_varchar_check() -> None:
    """Turn off pymilvus's client-side VARCHAR check for row writes (the store checks lengths itself).

    pymilvus 3.0.2 hands each row's string to a check written for a list of strings, so it walks the value
    one character at a time: about 2 ms for a 49 KB session snapshot (every turn writes one), and it can never
    fail, since every "item" is one character long. Lite and servers reject an over-long value themselves
    (code 6, tested in tests/test_storage.py).
    """
    entity_helper.CHECK_STR_ARRAY = False


def warm_insert_checks() -> None:
    """Make pymilvus's one-time check for SciPy sparse input now, not in a request's first write.

    pymilvus asks of every field of an insert whether it is a SciPy sparse matrix, and the first time it asks it
    imports scipy.sparse: measured after a restart on a 10k namespace, the first record_turn spent 0.2-0.7 s of its
    0.9-1.4 s on that import, holding the store's write lock, and the flusher's pause flush then started under it
    (the first memory_write of a process pays it too). Made on a start-up warm-up thread, before /healthz.
    """
    try:
        from pymilvus.client.utils import SciPyHelper

        SciPyHelper.is_scipy_sparse(None)
    except Exception:  # another pymilvus: its first insert does whatever it does, as before
        log.debug("pymilvus's sparse input check was not warmed", exc_info=True)


class MilvusStore(MemoryStore):
    """Milvus Lite (a local directory) or a Milvus server, with serialised writes and a flush policy."""

    kind: ClassVar[str] = "milvus"
    supports_dense: ClassVar[bool] = True

    def __init__(self, uri: str, *, token: str = "", db_name: str = "", flush_every: int = 200,
                 flush_interval: float = 5.0, trim_after_flush: bool = True,
                 trim: Callable[[], bool] = trim_free_memory, flush_every_unsearched: int = 1000) -> None:
        self.uri = uri
        self.is_server = uri.startswith(("http://", "https://", "tcp://", "grpc://"))
        self._token = token
        self._db_name = db_name
        self._flush_every = flush_every
        # A Lite collection nothing searched since its last flush waits for this many writes instead: what an
        # unflushed row costs is paid by searches (STORAGE.md #5), while a Lite flush (segment files, manifest,
        # then a compaction of the small segments) costs a bulk writer nearly as much for 200 rows as for 1,000.
        self._flush_every_unsearched = max(flush_every, flush_every_unsearched)
        self._searched: set[str] = set()  # Lite collections searched since their last flush
        self._flush_interval = flush_interval
        self._client: MilvusClient | None = None
        # Milvus Lite corrupts its write-ahead log under concurrent writers (STORAGE.md #1): every
        # write, flush and close goes through this one lock. Background work (the flusher, the embedding
        # backlog's vector writes: see `background`) takes it only when no request is waiting for it.
        self._write_lock = WriteLock()
        # Lite 3.2.2 misses rows that a concurrent flush is moving into a segment (measured: 88–141 of 300
        # searches for a row just written, with flushes running alongside): reads share this lock, a flush
        # holds it alone. A server has no such window.
        self._flush_gate = SharedLock() if not self.is_server else None
        self._pending: dict[str, int] = {}  # unflushed writes per collection (changed under the write lock)
        self._unflushed = 0  # their sum, which the flusher thread reads without the lock
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
        self._collections: set[str] = set()
        self._columns: dict[str, ColumnInsert | None] = {}  # Lite collections' column inserts (None: by rows)
        self._templates = False
        self._partial: bool | None = None  # partial upserts supported (asked of a server once)
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        # Only with a Lite file: that is where the engine's freed memory is this process's.
        self._trim = trim if trim_after_flush and not self.is_server else None
        self._last_trim = 0.0
        self._trim_until = 0.0  # trims go on until then (the last background flush + TRIM_SETTLE_SECONDS)
        self.trims = 0  # trims made and the seconds they took (tests and benchmarks read them)
        self.trim_seconds = 0.0

    # -- lifecycle -------------------------------------------------------------------------

    def open(self, connect_timeout: float = CONNECT_TIMEOUT) -> MilvusStore:
        """Connect (or open the Lite file), probe capabilities and start the periodic flusher."""
        skip_client_varchar_check()
        try:
            if not self.is_server:
                os.makedirs(os.path.dirname(os.path.abspath(self.uri)) or ".", exist_ok=True)
            # A channel of its own (not pymilvus's per-address shared one), closed with this store: a shared
            # channel outlives its clients, idles, and is what the next store on that address would inherit.
            kwargs: dict[str, Any] = {"uri": self.uri, "dedicated": True, "grpc_options": GRPC_OPTIONS,
                                      "timeout": connect_timeout}
            if self._token:
                kwargs["token"] = self._token
            if self._db_name:
                kwargs["db_name"] = self._db_name
            with _quiet("milvus_lite.server_manager"):
                self._client = MilvusClient(**kwargs)
        except Exception as error:  # pymilvus raises several unrelated types for "cannot open"
            raise StoreUnavailableError(_open_failure(self.uri, error)) from error
        self._flusher = threading.Thread(target=self._flush_loop, name="acn-flusher", daemon=True)
        self._flusher.start()
        return self

    def close(self) -> None:
        self._stop.set()
        with self._write_lock:
            if self._client is None:
                return
            try:
                self._flush_locked()
            except StoreUnavailableError:
                # The server is gone: its own log holds the writes; there is nothing more to flush from here.
                log.warning("final flush failed; closing anyway", exc_info=True)
            finally:
                self._client.close()
                self._client = None
                if not self.is_server:
                    _release_lite(self.uri)

    def info(self) -> dict[str, Any]:
        # The C++ Lite (milvus-lite < 3) does not implement GetVersion: an embedded store reports its package.
        version = self._call(lambda c: c.get_server_version()) if self.is_server else _lite_version()
        location = self.uri.split("@")[-1] if self.is_server else os.path.abspath(self.uri)
        return {"kind": "milvus-server" if self.is_server else "milvus-lite", "version": str(version),
                "uri": location, "filter_templates": self._templates}

    # -- schema ----------------------------------------------------------------------------

    def ensure(self, spec: CollectionSpec) -> None:
        with self._write_lock:
            client = self._require()
            if spec.partition_key and not self.is_server and _lite_version().startswith(("2.", "1.")):
                # The C++ Lite accepts a partition-key schema but then rejects every filter on the collection
                # ("Invalid expr", primary_key_offset == -1): the key only spreads rows, so go without it.
                spec = replace(spec, partition_key=None)
            started = time.monotonic()
            while True:
                try:
                    self._ensure_once(client, spec)
                    break
                except MilvusException as error:
                    # Replicas starting together against a new Milvus race to create the same collection: the
                    # loser hears "already exists" (a Lite server: "[Errno 17] File exists" while the winner is
                    # still writing it), or loads before the winner's index is there. Retry briefly whatever the
                    # error, and up to ENSURE_RACE_SECONDS once the collection is visible; then it is the store's.
                    waited = time.monotonic() - started
                    if waited < ENSURE_RETRY_SECONDS or (
                            waited < ENSURE_RACE_SECONDS and self._has_collection_quietly(client, spec.name)):
                        time.sleep(0.25)
                        continue
                    raise StoreUnavailableError(f"cannot prepare collection {spec.name}: {error.message}") from error
            self._collections.add(spec.name)
            self._columns.pop(spec.name, None)  # described again at its next insert
            # Embedded Lite (3.x and the C++ 2.x) never evaluates templates; probing the C++ one costs ~20 s of
            # pymilvus retries on its parse error.
            if not self._templates and self.is_server:
                self._templates = self._probe_templates(spec.name)

    def _ensure_once(self, client: MilvusClient, spec: CollectionSpec) -> None:
        schema, index = _build_schema(client, spec)
        if not client.has_collection(spec.name):
            kwargs: dict[str, Any] = {"schema": schema}
            if spec.partition_key:
                kwargs["num_partitions"] = 16
            client.create_collection(spec.name, **kwargs)
        # Also when the collection exists without its indexes: a start that died between the two calls.
        if not client.list_indexes(spec.name):
            # pymilvus polls a new index every 0.5 s, so waiting costs half a second per collection at a Lite
            # file's first start, where the index is ready at once; a server's build is waited for.
            if self.is_server:
                for name in (field for field in SERVER_INDEXED if field in spec.scalar_fields):
                    index.add_index(field_name=name, index_type="INVERTED", index_name=name)
            client.create_index(spec.name, index, sync=self.is_server)
        # Collections come back released after a restart (STORAGE.md #3); loading is idempotent.
        client.load_collection(spec.name)

    @staticmethod
    def _has_collection_quietly(client: MilvusClient, name: str) -> bool:
        try:
            return bool(client.has_collection(name))
        except MilvusException:
            return False

    def exists(self, collection: str) -> bool:
        return bool(self._call(lambda c: c.has_collection(collection)))

    def collection_names(self) -> list[str]:
        return [str(name) for name in self._call(lambda c: c.list_collections())]

    def _probe_templates(self, collection: str) -> bool:
        """Return True when the server evaluates filter_params templates (Milvus >= 2.5; Lite 3 does not)."""
        try:
            with _quiet("pymilvus.decorators"):
                self._require().query(collection, filter="id == {probe}", filter_params={"probe": "-"},
                                      output_fields=["id"], limit=1)
            return True
        except MilvusException:
            return False

    # -- writes ----------------------------------------------------------------------------

    def upsert(self, collection: str, records: list[Record]) -> None:
        if records:
            self._write(collection, len(records), lambda c: c.upsert(collection, records))

    def insert(self, collection: str, records: list[Record]) -> None:
        # Upsert looks every primary key up first; rows with fresh ids skip that (~6× faster on Lite
        # once a collection holds a few thousand rows).
        if records:
            self._write(collection, len(records), lambda c: self._insert(c, collection, records))

    def prepare_writes(self, inserted: str) -> None:
        """Fetch now what this process's first writes ask a Lite store for: pymilvus's cached schema of each
        collection (every upsert and row insert builds its request from it: a describe on the first) and the column
        insert of `inserted` (ColumnInsert.of: another). Measured after a restart on a 10k namespace: ~20 ms of a
        first record_turn's ~31 ms of CPU (~12 ms warm). Called by the start-up warmer; yields to requests."""
        if self.is_server:
            return
        with self.background(), self._write_lock:  # _columns changes under the write lock (see _insert)
            if self._client is None:
                return
            if inserted not in self._columns:
                self._columns[inserted] = ColumnInsert.of(self._client, inserted)
            for collection in sorted(self._collections):
                try:
                    self._client._get_connection()._get_schema(collection)  # noqa: SLF001 (see column_insert.py)
                except Exception:  # another pymilvus: the first write fetches it, as before
                    log.debug("collection %s: schema not fetched ahead", collection, exc_info=True)

    def _insert(self, client: MilvusClient, collection: str, records: list[Record]) -> None:
        """Insert by columns where that builds the same request (Lite: lite/column_insert.py), else by rows."""
        if not self.is_server and collection not in self._columns:
            self._columns[collection] = ColumnInsert.of(client, collection)
        columns = self._columns.get(collection)
        if columns is not None and columns.fits(records):
            if not columns.checked:
                columns = self._columns[collection] = (replace(columns, checked=True)
                                                       if columns.same_request(client, records) else None)
            if columns is not None:
                columns.insert(client, records)
                return
        client.insert(collection, records)

    def update_fields(self, collection: str, records: list[Record]) -> None:
        # Partial upserts: Milvus Lite 3.2.2 and servers from 2.6 on (a 2.5 server would need whole rows).
        if not self.partial_updates:
            raise NotImplementedError
        if records:
            self._write(collection, len(records), lambda c: c.upsert(collection, records, partial_update=True))

    @property
    def partial_updates(self) -> bool:
        """True when the engine updates some fields of a row and leaves the others (Lite 3, Milvus >= 2.6)."""
        if self._partial is None:
            self._partial = partial_updates_in(str(self._call(lambda c: c.get_server_version())))
        return self._partial

    def field_names(self, collection: str) -> set[str] | None:
        described = self._call(lambda c: c.describe_collection(collection))
        return {str(field["name"]) for field in described.get("fields", [])}

    def delete(self, collection: str, where: Filter) -> None:
        self._write(collection, 1, lambda c: c.delete(collection, **self._filter_kwargs(where)))

    def _write(self, collection: str, count: int, operation: Callable[[MilvusClient], object]) -> None:
        with self._write_lock:
            self._call(operation)
            self._after_write(collection, count)

    @contextmanager
    def background(self) -> Iterator[None]:
        """Writes in this block (this thread) yield to requests: they take the write lock only while no request
        waits for it, and do not make a pause flush due (they are flushed with the next requests' writes, on the
        timer or at flush_every).

        Why: a request that waits for the lock waits for the whole write in hand (a Lite write of a few rows is
        ~3-6 ms, a flush 15-300 ms under load); and a flush after every background batch (each batch ends in a
        pause) held the lock in front of requests and left Lite a small segment to compact each time.
        """
        previous = self._write_lock.background_thread(True)
        try:
            yield
        finally:
            self._write_lock.background_thread(previous)

    def wait_for_writes(self) -> None:
        """Return once the write lock is free (inside `background`: and no request waits for it).

        A background writer that must hold another lock while it writes (the embedding worker: the repository's
        write_order) calls this first, so that it does not hold that lock while a flush holds this one: a request
        waiting for write_order would wait for the flush too (measured: 300 ms behind a flush, through the worker).
        """
        with self._write_lock:
            pass

    def write_count(self, collection: str) -> int:
        """Writes (inserts, upserts, partial updates, deletes) this store has made to a collection: a reader that
        saw the same count before and after its read knows that no write of this process came between."""
        return self._writes.get(collection, 0)

    def lock_stats(self) -> dict[str, float]:
        """What the write lock cost, for metrics and benchmarks (see WriteLock.stats)."""
        return self._write_lock.stats()

    def flush(self) -> None:
        with self._write_lock:
            self._flush_locked()

    @property
    def unflushed(self) -> int:
        """Writes not yet flushed to segments."""
        return self._unflushed

    def unflushed_in(self, collection: str) -> int:
        """Writes to one collection not yet flushed to segments."""
        return self._pending.get(collection, 0)

    def _after_write(self, collection: str, count: int) -> None:
        # Normally the background flusher writes segments while the store is quiet (between turns), off
        # the request path; a writer that never pauses flushes a collection inline once flush_every of its
        # rows are pending, since searches over many unflushed rows are slow (STORAGE.md #5). Per collection:
        # a turn writes to two, and flushing each at its own count costs a request one flush, not both.
        pending = self._pending.get(collection, 0) + count
        self._pending[collection] = pending
        if not self._unflushed:
            self._oldest_unflushed = time.monotonic()
        self._unflushed += count
        self._writes[collection] = self._writes.get(collection, 0) + 1
        if not self._write_lock.in_background():
            self._requests_unflushed += count
            self._last_write = time.monotonic()
        if pending >= self.flush_threshold(collection):
            self._flush_locked([collection])

    def flush_threshold(self, collection: str) -> int:
        """Return the unflushed writes at which a write flushes the collection inline (a server: flush_every; a Lite
        file: flush_every once the collection was searched since its last flush, else flush_every_unsearched)."""
        if self.is_server or collection in self._searched:
            return self._flush_every
        return self._flush_every_unsearched

    def _flush_locked(self, collections: list[str] | None = None) -> None:
        """Flush the given collections (by default every one written since its last flush)."""
        if self._client is None:
            return
        with self._exclusive():
            for name in list(self._pending) if collections is None else collections:
                count = self._pending.get(name, 0)
                if count:
                    self._flush_one(name)  # a failure leaves the count pending: the flusher retries
                self._pending.pop(name, None)
                self._unflushed -= count
        if not self._unflushed:
            self._requests_unflushed = 0
        if collections is None:
            self._last_flush = time.monotonic()

    def _flush_one(self, collection: str) -> None:
        self._searched.discard(collection)  # before: a search during the flush counts for the next one
        self._call(lambda client: client.flush(collection))

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
        with self.background():
            for name in list(self._pending):
                with self._write_lock:
                    self._flush_locked([name])
            with self._write_lock:
                self._flush_locked()  # what was written meanwhile, and the time of this flush

    def _flush_due(self, now: float) -> bool:
        """Flush every flush_interval; with a Lite file also as soon as requests' writes pause for QUIET_SECONDS.

        A real server seals segments itself and dislikes frequent flushes (small segments): timer only.
        """
        if not self._unflushed:
            return False
        if self.is_server:
            return now - self._last_flush >= self._flush_interval
        # A Lite file: not while a request is still writing (a record_turn writes four or five times in a few ms)
        # unless its oldest unflushed write is flush_interval old. Timed from the last flush, the first write after
        # a quiet spell made the flush due at once, and the request's next write waited for it behind the write
        # lock (issue 47: a restarted process's first record_turn, ~300 ms). A server keeps that timer (above).
        if now - self._oldest_unflushed >= self._flush_interval:
            return True
        return self._requests_unflushed > 0 and now - self._last_write >= QUIET_SECONDS

    # -- reads -----------------------------------------------------------------------------

    def search_text(self, collection: str, query: str, *, limit: int, where: Filter,
                    fields: list[str]) -> list[Hit]:
        self._searched.add(collection)
        result = self._read(lambda c: c.search(
            collection, data=[query], anns_field="sparse", limit=min(limit, MAX_WINDOW),
            output_fields=fields, search_params={"metric_type": "BM25"}, **self._read_kwargs(where)))
        # Lite 3 returns BM25 as a negative distance, real Milvus as a positive score (STORAGE.md #4):
        # keep the engine's order and expose a positive magnitude.
        return [Hit(str(row["id"]), abs(float(row["distance"])), dict(row["entity"])) for row in result[0]]

    def search_dense(self, collection: str, vector: list[float], *, limit: int, where: Filter,
                     fields: list[str]) -> list[Hit]:
        self._searched.add(collection)
        result = self._read(lambda c: c.search(
            collection, data=[vector], anns_field="dense", limit=min(limit, MAX_WINDOW),
            output_fields=fields, search_params={"metric_type": "COSINE"}, **self._read_kwargs(where)))
        return [Hit(str(row["id"]), float(row["distance"]), dict(row["entity"])) for row in result[0]]

    def query(self, collection: str, where: Filter, *, fields: list[str], limit: int,
              offset: int = 0) -> list[Record]:
        limit = max(1, min(limit, MAX_WINDOW - offset))
        rows = self._read(lambda c: c.query(collection, output_fields=fields, limit=limit, offset=offset,
                                            **self._read_kwargs(where)))
        return [dict(row) for row in rows]

    # -- helpers ---------------------------------------------------------------------------

    def _reload(self) -> None:
        client = self._require()
        for name in sorted(self._collections):
            try:
                client.load_collection(name)
            except MilvusException as error:
                raise StoreUnavailableError(f"cannot reload collection {name}: {error.message}") from error

    def _filter_kwargs(self, where: Filter) -> dict[str, Any]:
        if not where.template:
            return {"filter": ""}
        if self._templates:
            return {"filter": where.template, "filter_params": dict(where.params)}
        return {"filter": where.render()}

    def _read_kwargs(self, where: Filter) -> dict[str, Any]:
        kwargs = self._filter_kwargs(where)
        if self.is_server:
            # A read must see the write just before it (STORAGE.md #10).
            kwargs["consistency_level"] = "Strong"
        return kwargs

    def _require(self) -> MilvusClient:
        if self._client is None:
            raise StoreUnavailableError("the store is not open")
        return self._client

    def _read(self, operation: Callable[[MilvusClient], T]) -> T:
        if self._flush_gate is None:
            return self._call(operation)
        # Lite runs in this process: a background read waits for requests' reads (acn/storage/lite/read_priority.py).
        with READS.reading(), self._flush_gate.shared():
            return self._call(operation)

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        if self._flush_gate is None:
            yield
            return
        with self._flush_gate.exclusive():
            yield

    def _call(self, operation: Callable[[MilvusClient], T]) -> T:
        client = self._require()
        try:
            return operation(client)
        except MilvusException as error:
            if not _is_released(error):
                raise StoreUnavailableError(f"store operation failed: {error.message}") from error
        except Exception as error:
            if _is_connection_error(error):
                raise StoreUnavailableError(f"store unreachable: {error}") from error
            raise
        # A restarted server comes back with collections released (STORAGE.md #3): load and retry once.
        self._reload()
        try:
            return operation(client)
        except MilvusException as error:
            raise StoreUnavailableError(f"store operation failed: {error.message}") from error
        except Exception as error:
            if _is_connection_error(error):
                raise StoreUnavailableError(f"store unreachable: {error}") from error
            raise


def partial_updates_in(version: str) -> bool:
    """Whether an engine of this version takes partial upserts: "milvus_lite-3.2.2" (Lite 3) and "v2.6.0" on do;
    the C++ Lite 2.5 and Milvus 2.5 servers do not, nor does anything unparsable."""
    try:
        if version.startswith("milvus_lite-"):
            return int(version.removeprefix("milvus_lite-").split(".")[0]) >= 3
        major, minor = version.lstrip("v").split(".")[:2]
        return (int(major), int(minor.split("-")[0])) >= (2, 6)
    except ValueError:
        return False


def _is_released(error: MilvusException) -> bool:
    text = str(error.message).lower()
    return "released" in text or "not loaded" in text


def _build_schema(client: MilvusClient, spec: CollectionSpec) -> tuple[Any, Any]:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    for name, kind in spec.scalar_fields.items():
        extra: dict[str, Any] = {"max_length": MAX_VARCHAR} if kind == "varchar" else {}
        if name == spec.partition_key:
            extra["is_partition_key"] = True
        schema.add_field(name, _DTYPES[kind], **extra)
    index = client.prepare_index_params()
    if spec.text_field:
        schema.add_field(spec.text_field, DataType.VARCHAR, max_length=MAX_VARCHAR, enable_analyzer=True,
                         analyzer_params=ANALYZERS[spec.analyzer])
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name=f"{spec.name}_bm25", function_type=FunctionType.BM25,
                                     input_field_names=[spec.text_field], output_field_names=["sparse"]))
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    # Milvus needs at least one vector field; a collection without text or embeddings gets a tiny one.
    dim = spec.dense_dim or (0 if spec.text_field else 2)
    if dim:
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        index.add_index(field_name="dense", index_type="AUTOINDEX", metric_type="COSINE")
    return schema, index


def _lite_version() -> str:
    """Return the installed milvus-lite version (the embedded engine)."""
    from importlib.metadata import version

    return version("milvus-lite")


def _release_lite(path: str) -> None:
    """Stop the embedded Lite server of a file: closes its database and lock, not only our connection."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(path)


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Silence a library logger that prints a traceback for an error we report ourselves."""
    logger = logging.getLogger(logger_name)
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


def _open_failure(uri: str, error: Exception) -> str:
    text = str(error)
    if "Open local milvus failed" in text or "lock" in text.lower():
        return (f"cannot open the Milvus Lite store at {uri}: another process has it open "
                "(Lite allows one process per file; run several workers against a Milvus server URI)")
    return f"cannot open the Milvus store at {uri}: {text}"


def _is_connection_error(error: Exception) -> bool:
    name = type(error).__module__
    return name.startswith("grpc") or isinstance(error, ConnectionError | TimeoutError)


def wait_until_ready(store: MilvusStore, attempts: int = 30, delay: float = 0.2) -> None:
    """Retry get_server_version until a just-started server answers."""
    for _ in range(attempts):
        try:
            store.info()
            return
        except StoreUnavailableError:
            time.sleep(delay)
    store.info()


def open_store(make: Callable[[], MilvusStore], wait_seconds: float,
               sleep: Callable[[float], None] = time.sleep) -> MilvusStore:
    """Open a store; a Milvus server that does not answer yet is retried with back-off for up to wait_seconds.

    In a compose file the server container may start before Milvus is ready: waiting (and saying so in the log)
    beats exiting at once and restart-looping. A Lite file is opened once: nothing will make it appear later.
    """
    deadline = time.monotonic() + wait_seconds
    delay = RETRY_FIRST_DELAY
    attempt = 1
    while True:
        store = make()
        remaining = deadline - time.monotonic()
        try:
            return store.open(connect_timeout=max(1.0, min(CONNECT_TIMEOUT, remaining)))
        except StoreUnavailableError as error:
            remaining = deadline - time.monotonic()
            if not store.is_server or remaining <= 0:
                if store.is_server and wait_seconds > 0:
                    log.error("store still unavailable; giving up",
                              extra={"attempt": attempt, "waited_seconds": round(wait_seconds, 1)})
                raise
            pause = min(delay, remaining)
            log.warning("store not ready; retrying",
                        extra={"attempt": attempt, "retry_in_seconds": round(pause, 2), "error": error.message,
                               "uri": store.uri.split("@")[-1]})
            sleep(pause)
            delay = min(delay * 2, RETRY_MAX_DELAY)
            attempt += 1
