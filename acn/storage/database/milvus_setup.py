"""What opening a Milvus store takes: the schema and analyzers, connection options, the engine's version and quirks.

MilvusStore (milvus.py) uses these; `open_store` retries a server that is not up yet.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from pymilvus import DataType, Function, FunctionType, MilvusClient
from pymilvus.client import entity_helper
from pymilvus.exceptions import MilvusException

from acn.common.errors import StoreUnavailableError
from acn.storage.database.base import CollectionSpec

log = logging.getLogger("acn.store")


class Opening(Protocol):
    """What open_store needs of a store (MilvusStore)."""

    uri: str
    is_server: bool

    def open(self, connect_timeout: float = ...) -> Any: ...

    def info(self) -> dict[str, Any]: ...


S = TypeVar("S", bound=Opening)

# The portable jieba analyzer: same ranking on Lite 3 and the C++ engine ({"type": "chinese"} is
# rejected by Lite 3). See STORAGE.md.
ANALYZER = {"tokenizer": "jieba", "filter": ["lowercase", "cnalphanumonly"]}
# Text that is already tokens (acn/storage/database/sealed.py writes lower-case base32 hashes separated by spaces).
# Milvus's "whitespace" tokenizer would say it best, but Lite 3.2.2 knows only "standard" and "jieba"; "standard" splits
# on non-word characters, and a token of [a-z2-7] is one word on both engines.
ANALYZERS = {"jieba": ANALYZER, "hashed": {"tokenizer": "standard"}}
MAX_VARCHAR = 65535
# Lite accepts limits real Milvus rejects; keep limit + offset within what servers allow.
MAX_WINDOW = 16384
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
DTYPES = {"varchar": DataType.VARCHAR, "int64": DataType.INT64, "float": DataType.FLOAT, "json": DataType.JSON}


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


def is_released(error: MilvusException) -> bool:
    text = str(error.message).lower()
    return "released" in text or "not loaded" in text


def dense_index_type(server: bool) -> str:
    """Return the dense vector index a new collection gets: AUTOINDEX on a Milvus server (its own choice, e.g. HNSW),
    FLAT in a Lite file. Lite 3 maps AUTOINDEX to an HNSW graph (faiss, efConstruction 200) that it builds again over
    every flushed and every compacted segment, yet a Lite file's reads are answered by the in-process index
    (lite/held.py). The store's own search (before that index is loaded, or when it cannot wait for it) builds its
    filter mask row by row over the whole collection anyway; a FLAT scan then multiplies only the rows the filter lets
    through (a session's), exactly, where a graph searched under a narrow filter is neither faster nor exact.
    bench.long_session's chat with `use`, 3,000 turns in process: the graphs
    of 37,017 rows built over 205 segments took 5.9 s of CPU (2.0 ms a turn, 4.9 in the last 250), none of them ever
    searched; their FLAT scans 0.01 s (issue 47)."""
    return "AUTOINDEX" if server else "FLAT"


def vector_dim(spec: CollectionSpec) -> int:
    """Return the dimension of the collection's "dense" field, 0 for none. Milvus needs at least one vector field: a
    collection without text or embeddings (the sessions, the memory heads) gets a tiny one."""
    return spec.dense_dim or (0 if spec.text_field else 2)


def scanned_vectors(client: MilvusClient, collection: str) -> None:
    """Give a Lite file's collection made before dense_index_type the FLAT index (once: its graphs are dropped; the
    load then writes each segment's vectors beside it, the I/O of one copy of them). A start that died in between
    left no dense index: it is created."""
    described = client.describe_index(collection, "dense")
    if described and described.get("index_type") == "FLAT":
        return
    if described:
        log.info("collection %s: the dense index %s becomes FLAT (a Lite file reads from the in-process index)",
                 collection, described.get("index_type"))
        client.release_collection(collection)
        client.drop_index(collection, "dense")
    index = client.prepare_index_params()
    index.add_index(field_name="dense", index_type=dense_index_type(False), metric_type="COSINE")
    client.create_index(collection, index, sync=False)


def build_schema(client: MilvusClient, spec: CollectionSpec, *, server: bool = True) -> tuple[Any, Any]:
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    for name, kind in spec.scalar_fields.items():
        extra: dict[str, Any] = {"max_length": MAX_VARCHAR} if kind == "varchar" else {}
        if name == spec.partition_key:
            extra["is_partition_key"] = True
        schema.add_field(name, DTYPES[kind], **extra)
    index = client.prepare_index_params()
    if spec.text_field:
        schema.add_field(spec.text_field, DataType.VARCHAR, max_length=MAX_VARCHAR, enable_analyzer=True,
                         analyzer_params=ANALYZERS[spec.analyzer])
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(Function(name=f"{spec.name}_bm25", function_type=FunctionType.BM25,
                                     input_field_names=[spec.text_field], output_field_names=["sparse"]))
        index.add_index(field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25")
    dim = vector_dim(spec)
    if dim:
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=dim)
        index.add_index(field_name="dense", index_type=dense_index_type(server), metric_type="COSINE")
    return schema, index


def lite_version() -> str:
    """Return the installed milvus-lite version (the embedded engine)."""
    from importlib.metadata import version

    return version("milvus-lite")


# A Lite manifest lists a collection's segment files (a few KB); a larger one is not read (the load is waited for).
MAX_MANIFEST_BYTES = 4 << 20


def lite_stored_rows(path: str, collection: str) -> int | None:
    """Return how many rows a Lite file's collection has taken in all (its manifest's sequence number: every insert,
    upsert and delete counts, so never fewer than it holds), or None when the file is not laid out as Milvus Lite 3
    lays it out (a first search of the store reads every row: see HeldIndexes.store_sooner)."""
    try:
        with open(os.path.join(path, "collections", collection, "manifest.json"), "rb") as manifest:
            text = manifest.read(MAX_MANIFEST_BYTES + 1)
        seq = json.loads(text).get("current_seq") if len(text) <= MAX_MANIFEST_BYTES else None
    except (OSError, ValueError, AttributeError, RecursionError):  # a file of another layout, or damaged
        return None
    return seq if isinstance(seq, int) and not isinstance(seq, bool) and seq >= 0 else None


def release_lite(path: str) -> None:
    """Stop the embedded Lite server of a file: closes its database and lock, not only our connection."""
    from milvus_lite.server_manager import server_manager_instance

    server_manager_instance.release_server(path)


@contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    """Silence a library logger that prints a traceback for an error we report ourselves."""
    logger = logging.getLogger(logger_name)
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(previous)


def open_failure(uri: str, error: Exception) -> str:
    text = str(error)
    if "Open local milvus failed" in text or "lock" in text.lower():
        return (f"cannot open the Milvus Lite store at {uri}: another process has it open "
                "(Lite allows one process per file; run several workers against a Milvus server URI)")
    return f"cannot open the Milvus store at {uri}: {text}"


def is_connection_error(error: Exception) -> bool:
    name = type(error).__module__
    return name.startswith("grpc") or isinstance(error, ConnectionError | TimeoutError)


def wait_until_ready(store: Opening, attempts: int = 30, delay: float = 0.2) -> None:
    """Retry get_server_version until a just-started server answers."""
    for _ in range(attempts):
        try:
            store.info()
            return
        except StoreUnavailableError:
            time.sleep(delay)
    store.info()


def open_store(make: Callable[[], S], wait_seconds: float, sleep: Callable[[float], None] = time.sleep) -> S:
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
            store.open(connect_timeout=max(1.0, min(CONNECT_TIMEOUT, remaining)))
            return store
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
