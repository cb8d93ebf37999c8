"""MemoryStore over pymilvus: one code path for a Milvus Lite file and a Milvus server URI."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, ClassVar, TypeVar

from pymilvus import MilvusClient
from pymilvus.exceptions import MilvusException

from acn.common.errors import StoreUnavailableError
from acn.storage.database.base import CollectionSpec, Filter, Hit, MemoryStore, Record
from acn.storage.database.flushing import Flushes
from acn.storage.database.lite.column_insert import ColumnInsert
from acn.storage.database.lite.read_priority import READS
from acn.storage.database.lite.tombstones import share_tombstone_snapshots
from acn.storage.database.locks import SharedLock, WriteLock
from acn.storage.database.milvus_setup import (
    CONNECT_TIMEOUT,
    ENSURE_RACE_SECONDS,
    ENSURE_RETRY_SECONDS,
    GRPC_OPTIONS,
    MAX_WINDOW,
    SERVER_INDEXED,
    build_schema,
    is_connection_error,
    is_released,
    lite_version,
    open_failure,
    partial_updates_in,
    quiet,
    release_lite,
    scanned_vectors,
    skip_client_varchar_check,
    vector_dim,
)

log = logging.getLogger("acn.store")
T = TypeVar("T")


class MilvusStore(MemoryStore):
    """Milvus Lite (a local directory) or a Milvus server, with serialised writes and a flush policy."""

    kind: ClassVar[str] = "milvus"
    supports_dense: ClassVar[bool] = True

    def __init__(self, uri: str, *, token: str = "", db_name: str = "", flush_every: int = 200,
                 flush_interval: float = 5.0, trim_after_flush: bool = True,
                 trim: Callable[[], bool] | None = None, flush_every_unsearched: int = 1000) -> None:
        self.uri = uri
        self.is_server = uri.startswith(("http://", "https://", "tcp://", "grpc://"))
        self._token = token
        self._db_name = db_name
        self._client: MilvusClient | None = None
        # Milvus Lite corrupts its write-ahead log under concurrent writers (STORAGE.md #1): every
        # write, flush and close goes through this one lock. Background work (the flusher, the embedding
        # backlog's vector writes: see `background`) takes it only when no request is waiting for it.
        self._write_lock = WriteLock()
        # Lite 3.2.2 misses rows that a concurrent flush is moving into a segment (measured: 88–141 of 300
        # searches for a row just written, with flushes running alongside): reads share this lock, a flush
        # holds it alone. A server has no such window.
        self._flush_gate = SharedLock() if not self.is_server else None
        self._collections: set[str] = set()
        self._columns: dict[str, ColumnInsert | None] = {}  # Lite collections' column inserts (None: by rows)
        self._templates = False
        self._partial: bool | None = None  # partial upserts supported (asked of a server once)
        # When writes are flushed (flushing.py): its counters (unflushed, unflushed_in, write_count, trims) are read
        # through this attribute.
        self.flushes = Flushes(is_server=self.is_server, flush_every=flush_every,
                                flush_every_unsearched=flush_every_unsearched, flush_interval=flush_interval,
                                trim=trim if trim_after_flush else None, write_lock=self._write_lock,
                                flush_gate=self._flush_gate, flush_one=self._flush_one,
                                connected=lambda: self._client is not None)

    # -- lifecycle -------------------------------------------------------------------------

    def open(self, connect_timeout: float = CONNECT_TIMEOUT) -> MilvusStore:
        """Connect (or open the Lite file), probe capabilities and start the periodic flusher."""
        skip_client_varchar_check()
        try:
            if not self.is_server:
                share_tombstone_snapshots()  # before the file's collections are recovered (lite/tombstones.py)
                os.makedirs(os.path.dirname(os.path.abspath(self.uri)) or ".", exist_ok=True)
            # A channel of its own (not pymilvus's per-address shared one), closed with this store: a shared
            # channel outlives its clients, idles, and is what the next store on that address would inherit.
            kwargs: dict[str, Any] = {"uri": self.uri, "dedicated": True, "grpc_options": GRPC_OPTIONS,
                                      "timeout": connect_timeout}
            if self._token:
                kwargs["token"] = self._token
            if self._db_name:
                kwargs["db_name"] = self._db_name
            with quiet("milvus_lite.server_manager"):
                self._client = MilvusClient(**kwargs)
        except Exception as error:  # pymilvus raises several unrelated types for "cannot open"
            raise StoreUnavailableError(open_failure(self.uri, error)) from error
        self.flushes.start()
        return self

    def close(self) -> None:
        self.flushes.stop()
        with self._write_lock:
            if self._client is None:
                return
            try:
                self.flushes.flush_locked()
            except StoreUnavailableError:
                # The server is gone: its own log holds the writes; there is nothing more to flush from here.
                log.warning("final flush failed; closing anyway", exc_info=True)
            finally:
                self._client.close()
                self._client = None
                if not self.is_server:
                    release_lite(self.uri)

    def info(self) -> dict[str, Any]:
        # The C++ Lite (milvus-lite < 3) does not implement GetVersion: an embedded store reports its package.
        version = self._call(lambda c: c.get_server_version()) if self.is_server else lite_version()
        location = self.uri.split("@")[-1] if self.is_server else os.path.abspath(self.uri)
        return {"kind": "milvus-server" if self.is_server else "milvus-lite", "version": str(version),
                "uri": location, "filter_templates": self._templates}

    # -- schema ----------------------------------------------------------------------------

    def ensure(self, spec: CollectionSpec) -> None:
        with self._write_lock:
            client = self._require()
            if spec.partition_key and not self.is_server and lite_version().startswith(("2.", "1.")):
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
        schema, index = build_schema(client, spec, server=self.is_server)
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
        elif vector_dim(spec) and not self.is_server and not lite_version().startswith(("2.", "1.")):
            scanned_vectors(client, spec.name)  # a file made before FLAT (the C++ Lite scans whatever it is asked)
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
            with quiet("pymilvus.decorators"):
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
            self.flushes.written(collection, count)

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

    def lock_stats(self) -> dict[str, float]:
        """What the write lock cost, for metrics and benchmarks (see WriteLock.stats)."""
        return self._write_lock.stats()

    def flush(self) -> None:
        with self._write_lock:
            self.flushes.flush_locked()

    def _flush_one(self, collection: str) -> None:
        self._call(lambda client: client.flush(collection))

    # -- reads -----------------------------------------------------------------------------

    def search_text(self, collection: str, query: str, *, limit: int, where: Filter,
                    fields: list[str]) -> list[Hit]:
        self.flushes.searched.add(collection)
        result = self._read(lambda c: c.search(
            collection, data=[query], anns_field="sparse", limit=min(limit, MAX_WINDOW),
            output_fields=fields, search_params={"metric_type": "BM25"}, **self._read_kwargs(where)))
        # Lite 3 returns BM25 as a negative distance, real Milvus as a positive score (STORAGE.md #4):
        # keep the engine's order and expose a positive magnitude.
        return [Hit(str(row["id"]), abs(float(row["distance"])), dict(row["entity"])) for row in result[0]]

    def search_dense(self, collection: str, vector: list[float], *, limit: int, where: Filter,
                     fields: list[str]) -> list[Hit]:
        self.flushes.searched.add(collection)
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
        # Lite runs in this process: a background read waits for requests' reads
        # (acn/storage/database/lite/read_priority.py).
        with READS.reading(), self._flush_gate.shared():
            return self._call(operation)

    def _call(self, operation: Callable[[MilvusClient], T]) -> T:
        client = self._require()
        try:
            return operation(client)
        except MilvusException as error:
            if not is_released(error):
                raise StoreUnavailableError(f"store operation failed: {error.message}") from error
        except Exception as error:
            if is_connection_error(error):
                raise StoreUnavailableError(f"store unreachable: {error}") from error
            raise
        # A restarted server comes back with collections released (STORAGE.md #3): load and retry once.
        self._reload()
        try:
            return operation(client)
        except MilvusException as error:
            raise StoreUnavailableError(f"store operation failed: {error.message}") from error
        except Exception as error:
            if is_connection_error(error):
                raise StoreUnavailableError(f"store unreachable: {error}") from error
            raise
