"""Vectors off the request path (issue 17 §2): rows are BM25-searchable at once, the backlog worker fills their
vectors, dense search never returns a row that waits, a killed process's backlog is resumed, concurrent rewrites
are not undone. Real Milvus Lite files on tmp_path; the hash embedder (or a test embedder) stands in for e5."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from acn.common.models import Memory, Namespace
from acn.providers.embedders import Embedder, HashEmbedder
from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.memory_rows import EMBEDDED_FIELD, client_id, memory_spec, pending_vector
from acn.storage.database.milvus import MilvusStore
from acn.storage.process.embedding_backlog import EmbeddingBacklog
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import ROOT, make_settings, post, record_filters

NS = Namespace(agent_id="a", session_id="s")
TEXTS = ("the reconciliation timeout is 30 seconds", "my sister likes ramen with extra egg",
         "the invoice account is 6222 0000 1111", "we moved the standup to Thursday")


def memory(index: int, content: str, **update: object) -> Memory:
    base = Memory(id=f"m{index}", kind="fact", content=content, scope="session", agent_id="a", session_id="s",
                  created_at=1000 + index, updated_at=1000 + index, version=1, importance=5.0)
    return base.model_copy(update=update)


def open_repository(folder: Path, embedder: Embedder | None = None, *,
                    embed_later: bool = True) -> tuple[MilvusStore, MemoryRepository]:
    store = MilvusStore(str(folder / "memory.db")).open()
    repository = MemoryRepository(store, prefix="bk", embedder=embedder or HashEmbedder(), embed_later=embed_later)
    repository.open()
    return store, repository


@pytest.fixture()
def opened(tmp_path: Path) -> Iterator[tuple[MilvusStore, MemoryRepository]]:
    store, repository = open_repository(tmp_path)
    yield store, repository
    store.close()


def stored(repository: MemoryRepository) -> dict[str, dict[str, object]]:
    rows = repository.store.query(repository.spec.name, Filter(""), fields=["id", "content", "valid_to", "dense",
                                                                             EMBEDDED_FIELD], limit=100)
    return {client_id(str(row["id"])): row for row in rows}  # keyed by the ids clients know


@pytest.mark.parametrize("within", [NS, None], ids=["in-process index", "store search"])
def test_rows_are_found_by_text_at_once_and_by_vector_after_the_worker(
        opened: tuple[MilvusStore, MemoryRepository], within: Namespace | None) -> None:
    _, repository = opened
    backlog = EmbeddingBacklog(repository)  # not started: nothing is embedded until drain
    repository.save("t", [memory(i, text) for i, text in enumerate(TEXTS)])
    assert {row[EMBEDDED_FIELD] for row in stored(repository).values()} == {0}
    assert backlog.queued() == len(TEXTS)

    hits = repository.search("t", "reconciliation timeout", Filter(""), limit=5, within=within)
    assert [h.memory.id for h in hits if h.bm25_rank == 1] == ["m0"]  # BM25 finds the row at once
    assert all(h.dense_rank is None for h in hits)  # dense search skips every row that waits

    assert backlog.drain(timeout=30)
    rows = stored(repository)
    assert {row[EMBEDDED_FIELD] for row in rows.values()} == {1}
    for i, text in enumerate(TEXTS):
        assert rows[f"m{i}"]["dense"] == pytest.approx(HashEmbedder().embed(text), abs=1e-6)
    hits = repository.search("t", "reconciliation timeout", Filter(""), limit=5, within=within)
    assert next(h for h in hits if h.memory.id == "m0").dense_rank == 1
    assert backlog.filled == len(TEXTS)


class SentinelQuery(HashEmbedder):
    """Every query vector is exactly the placeholder vector of a waiting row: its cosine with one would be 1.0."""

    name: ClassVar[str] = "sentinel-query"

    def embed_query(self, text: str) -> list[float]:
        return pending_vector(self.dim)


@pytest.mark.parametrize("within", [NS, None], ids=["in-process index", "store search"])
def test_dense_search_never_returns_a_row_that_waits_for_its_vector(tmp_path: Path, within: Namespace | None) -> None:
    store, repository = open_repository(tmp_path, SentinelQuery())
    try:
        EmbeddingBacklog(repository)
        repository.save("t", [memory(0, "waiting row")])
        hits = repository.search("t", "anything else", Filter(""), limit=5, within=within)
        assert [h.memory.id for h in hits if h.dense_rank is not None] == []
    finally:
        store.close()


CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from tests.test_embedding_backlog import TEXTS, memory, open_repository
    from acn.storage.process.embedding_backlog import EmbeddingBacklog
    store, repository = open_repository(Path(sys.argv[1]))
    EmbeddingBacklog(repository)  # the worker never runs: killed before it drains
    for i, text in enumerate(TEXTS * 5):
        repository.save("t", [memory(i, f"{text} #{i}")])
    print("written", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_killed_process_leaves_its_backlog_for_the_next_start(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], cwd=ROOT, capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL and b"written" in child.stdout, child.stderr[-2000:]
    store, repository = open_repository(tmp_path)
    try:
        assert len(stored(repository)) == 20 and {r[EMBEDDED_FIELD] for r in stored(repository).values()} == {0}
        backlog = EmbeddingBacklog(repository)  # a fresh start: the store scan finds the waiting rows
        assert backlog.drain(timeout=60)
        rows = stored(repository)
        assert {row[EMBEDDED_FIELD] for row in rows.values()} == {1}
        assert all(row["dense"] == pytest.approx(HashEmbedder().embed(str(row["content"])), abs=1e-6)
                   for row in rows.values())
    finally:
        store.close()


@pytest.mark.parametrize("partial", [True, False], ids=["partial update", "whole rows (no partial updates)"])
def test_a_row_rewritten_while_its_text_was_embedded_keeps_the_new_text_and_gets_its_vector(
        opened: tuple[MilvusStore, MemoryRepository], partial: bool) -> None:
    store, repository = opened
    store._partial = partial  # False: as the C++ Lite 2.5 or a Milvus 2.5 server (whole rows under write_order)
    backlog = EmbeddingBacklog(repository)
    repository.save("t", [memory(0, "old text"), memory(1, "kept text")])
    embedder = HashEmbedder()
    # The worker embedded "old text"; before it writes, a request rewrites m0 and supersedes m1.
    repository.save("t", [memory(0, "new text"), memory(1, "kept text", valid_to=5000, superseded_by="m9")])
    written = backlog.fill("t", [("m0", "old text", embedder.embed("old text")),
                                 ("m1", "kept text", embedder.embed("kept text"))])
    rows = stored(repository)
    assert written == 1 and rows["m0"][EMBEDDED_FIELD] == 0 and rows["m0"]["content"] == "new text"
    assert rows["m1"][EMBEDDED_FIELD] == 1 and rows["m1"]["valid_to"] == 5000  # the supersede is not undone
    assert backlog.drain(timeout=30)
    rows = stored(repository)
    assert rows["m0"][EMBEDDED_FIELD] == 1 and rows["m0"]["dense"] == pytest.approx(embedder.embed("new text"),
                                                                                      abs=1e-6)


def test_a_row_rewritten_between_the_workers_read_and_its_write_is_read_again(
        opened: tuple[MilvusStore, MemoryRepository]) -> None:
    # The worker reads the rows before it takes write_order (a short hold); a request that rewrites a row right
    # after that read is seen (the store's write count moved) and the row is read again inside write_order.
    store, repository = opened
    backlog = EmbeddingBacklog(repository)
    repository.save("t", [memory(0, "old text")])
    embedder = HashEmbedder()
    original = store.query
    rewritten: list[bool] = []

    def query(*args: object, **kwargs: object) -> object:
        rows = original(*args, **kwargs)  # type: ignore[arg-type]
        if not rewritten and any(row.get("content") == "old text" for row in rows):  # type: ignore[attr-defined]
            rewritten.append(True)
            repository.save("t", [memory(0, "new text")])  # lands between the read and the write
        return rows

    store.query = query  # type: ignore[method-assign]
    assert backlog.fill("t", [("m0", "old text", embedder.embed("old text"))]) == 0
    store.query = original  # type: ignore[method-assign]
    row = stored(repository)["m0"]
    assert rewritten and row["content"] == "new text" and row[EMBEDDED_FIELD] == 0
    assert backlog.drain(timeout=30)
    row = stored(repository)["m0"]
    assert row[EMBEDDED_FIELD] == 1 and row["dense"] == pytest.approx(embedder.embed("new text"), abs=1e-6)


def test_two_workers_on_the_same_rows_write_the_same_vectors(opened: tuple[MilvusStore, MemoryRepository]) -> None:
    _, repository = opened
    first = EmbeddingBacklog(repository)
    second = EmbeddingBacklog(repository)  # both get every row (the scan), as two processes on one server would
    repository.save("t", [memory(i, text) for i, text in enumerate(TEXTS)])
    vectors = HashEmbedder().embed_batch(list(TEXTS))
    items = [(f"m{i}", text, vectors[i]) for i, text in enumerate(TEXTS)]
    assert first.fill("t", items) == len(TEXTS)
    assert second.fill("t", items) == 0  # the rows no longer wait: nothing is written twice
    assert second.drain(timeout=30) and first.drain(timeout=30)
    rows = stored(repository)
    assert all(rows[f"m{i}"]["dense"] == pytest.approx(vectors[i], abs=1e-6) for i in range(len(TEXTS)))


def test_a_deleted_row_is_not_created_again_by_its_vector(opened: tuple[MilvusStore, MemoryRepository]) -> None:
    _, repository = opened
    backlog = EmbeddingBacklog(repository)
    repository.save("t", [memory(0, "to delete"), memory(1, "to keep")])
    repository.delete_ids("t", ["m0"])
    assert backlog.drain(timeout=30)
    assert set(stored(repository)) == {"m1"} and stored(repository)["m1"][EMBEDDED_FIELD] == 1


def test_a_collection_written_before_the_flag_is_embedded_inline(tmp_path: Path) -> None:
    store = MilvusStore(str(tmp_path / "memory.db")).open()
    try:
        store.ensure(memory_spec("bk", HashEmbedder().dim, flagged=False))  # as an earlier version created it
        repository = MemoryRepository(store, prefix="bk", embedder=HashEmbedder(), embed_later=True)
        repository.open()
        assert not repository.embed_later and EMBEDDED_FIELD not in repository.spec.scalar_fields
        repository.save("t", [memory(0, "the reconciliation timeout is 30 seconds")])
        hits = repository.search("t", "reconciliation timeout", Filter(""), limit=5, within=NS)
        assert hits and hits[0].dense_rank == 1
    finally:
        store.close()


def test_encrypted_rows_get_their_vectors_and_stay_sealed(tmp_path: Path) -> None:
    from cryptography.fernet import Fernet

    from acn.storage.database.sealed import RowSealer

    store = MilvusStore(str(tmp_path / "memory.db")).open()
    try:
        repository = MemoryRepository(store, prefix="bk", embedder=HashEmbedder(), embed_later=True,
                                      sealer=RowSealer(Fernet.generate_key().decode()))
        repository.open()
        backlog = EmbeddingBacklog(repository)
        repository.save("t", [memory(0, "the reconciliation timeout is 30 seconds")])
        assert backlog.drain(timeout=30) and backlog.filled == 1
        raw = store.query(repository.spec.name, Filter(""), fields=["content", "sealed", EMBEDDED_FIELD], limit=5)
        assert raw[0][EMBEDDED_FIELD] == 1 and "timeout" not in str(raw[0]["content"]) + str(raw[0]["sealed"])
        hits = repository.search("t", "reconciliation timeout", Filter(""), limit=5)
        assert hits[0].memory.content == "the reconciliation timeout is 30 seconds" and hits[0].dense_rank == 1
    finally:
        store.close()


def test_the_server_embeds_recorded_turns_in_the_background(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, embedder="hash", embedding_backlog="on"))
    runtime = app.extensions["acn"]
    try:
        assert runtime.backlog is not None and runtime.memories.embed_later
        client = app.test_client()
        ns = {"agent_id": "bg", "session_id": "s1"}
        response = post(client, "record_turn", {**ns, "messages": [
            {"role": "user", "content": "the reconciliation timeout is 30 seconds"},
            {"role": "assistant", "content": "noted"}]})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert runtime.backlog.drain(timeout=30)
        rows = stored(runtime.memories)
        assert rows and {row[EMBEDDED_FIELD] for row in rows.values()} == {1}
        scraped = client.get("/metrics").get_data(as_text=True)  # an operator sees the backlog and its progress
        assert "acn_embedding_backlog 0.0" in scraped and f"acn_embedded_rows {float(len(rows))}" in scraped
        assert "acn_store_write_lock_waits_behind_background " in scraped and "acn_store_write_lock_wait_seconds " \
            in scraped
    finally:
        runtime.close()


def test_a_request_write_goes_between_the_vector_writes_of_one_batch(
        opened: tuple[MilvusStore, MemoryRepository]) -> None:
    # A request that writes while the worker is mid-batch waits for the few rows in hand, never for the whole
    # batch: the worker holds write_order for WRITE_ROWS vectors at a time. Once the worker's first vectors are
    # written, a request saves; the worker's next store call waits for that save to finish (bounded), which it
    # can only do if the worker does not hold write_order across its calls. Before: the worker re-read and wrote
    # the whole batch in one hold, and the save finished after every vector of the batch.
    from acn.storage.process import embedding_backlog

    store, repository = opened
    rows = 12  # three holds of WRITE_ROWS (4)
    backlog = EmbeddingBacklog(repository, batch=rows)
    repository.save("t", [memory(i, f"{TEXTS[i % len(TEXTS)]} #{i}") for i in range(rows)])
    worker = threading.get_ident()
    written: list[int] = []  # vectors written by the worker so far, as each of its writes returns
    first_written, request_done = threading.Event(), threading.Event()
    seen_by_request: list[int] = []

    def request() -> None:
        first_written.wait(30)
        repository.save("t", [memory(100, "a request's row, written while the worker is mid-batch")])
        seen_by_request.append(sum(written))
        request_done.set()

    def watched(name: str) -> None:
        original = getattr(store, name)

        def call(*args: object, **kwargs: object) -> object:
            if threading.get_ident() == worker and first_written.is_set():
                request_done.wait(10)  # the request runs now, unless the worker holds what it needs
            result = original(*args, **kwargs)
            if threading.get_ident() == worker and name in ("update_fields", "upsert") and \
                    args[0] == repository.spec.name:
                written.append(len(args[1]))  # type: ignore[arg-type]
                first_written.set()
            return result

        setattr(store, name, call)

    for name in ("query", "update_fields", "upsert", "insert", "search_text", "search_dense"):
        watched(name)
    thread = threading.Thread(target=request)
    thread.start()
    try:
        assert backlog.run_once() == rows
    finally:
        first_written.set()
        thread.join(30)
    assert seen_by_request and seen_by_request[0] < rows, (seen_by_request, written)
    assert max(written) <= embedding_backlog.WRITE_ROWS < rows
    assert backlog.drain(timeout=30)
    stored_rows = stored(repository)
    assert len(stored_rows) == rows + 1 and {row[EMBEDDED_FIELD] for row in stored_rows.values()} == {1}


def test_the_worker_does_not_hold_write_order_while_a_flush_holds_the_store(
        opened: tuple[MilvusStore, MemoryRepository]) -> None:
    # A request waiting for write_order must not wait for a flush through the worker: the worker waits for the
    # store's lock to be free before it takes write_order (before: it held write_order while waiting, 300 ms
    # behind a flush on a loaded machine).
    store, repository = opened
    backlog = EmbeddingBacklog(repository)
    repository.save("t", [memory(0, "the reconciliation timeout is 30 seconds")])
    vector = HashEmbedder().embed("the reconciliation timeout is 30 seconds")
    flushing, flushed, read = threading.Event(), threading.Event(), threading.Event()
    original = store.query

    def query(*args: object, **kwargs: object) -> object:
        rows = original(*args, **kwargs)  # type: ignore[arg-type]
        read.set()
        return rows

    def flush() -> None:  # as the flusher: the store's lock held in background mode
        with store.background(), store._write_lock:
            flushing.set()
            flushed.wait(10)

    store.query = query  # type: ignore[method-assign]
    flusher = threading.Thread(target=flush)
    flusher.start()
    assert flushing.wait(10)
    worker = threading.Thread(target=backlog.fill, args=("t", [("m0", "the reconciliation timeout is 30 seconds",
                                                                  vector)]))
    worker.start()
    try:
        assert read.wait(10)
        time.sleep(0.3)  # the worker now waits for the store's lock
        free = repository.write_order.acquire(blocking=False)
        if free:
            repository.write_order.release()
    finally:
        flushed.set()
        flusher.join(10)
        worker.join(10)
        store.query = original  # type: ignore[method-assign]
    assert free
    assert stored(repository)["m0"][EMBEDDED_FIELD] == 1


def test_vector_writes_do_not_make_the_store_flush_but_requests_writes_do(tmp_path: Path) -> None:
    # A Lite file is flushed in the pause after requests' writes. The worker's vector writes are flushed with
    # those (or on the timer): before, each batch ended in a pause and a flush (15-300 ms holding the store's
    # lock in front of requests, and one more small segment for Lite to compact).
    store = MilvusStore(str(tmp_path / "memory.db"), flush_every=10_000, flush_interval=60.0).open()
    try:
        repository = MemoryRepository(store, prefix="bk", embedder=HashEmbedder(), embed_later=True)
        repository.open()
        backlog = EmbeddingBacklog(repository)
        repository.save("t", [memory(i, text) for i, text in enumerate(TEXTS)])
        deadline = time.monotonic() + 5.0
        while store.flushes.unflushed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.flushes.unflushed == 0  # the request's rows: flushed in the pause after them
        assert backlog.drain(timeout=30) and backlog.filled == len(TEXTS)
        assert store.flushes.unflushed == len(TEXTS)
        time.sleep(1.0)  # five times the pause after which a request's writes are flushed
        assert store.flushes.unflushed == len(TEXTS)
        repository.save("t", [memory(9, "a request's row")])
        deadline = time.monotonic() + 5.0
        while store.flushes.unflushed and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.flushes.unflushed == 0  # the vectors went with the next requests' flush
    finally:
        store.close()


def test_which_engines_take_partial_updates() -> None:
    from acn.storage.database.milvus_setup import partial_updates_in

    assert partial_updates_in("milvus_lite-3.2.2") and partial_updates_in("v2.6.0") and partial_updates_in("2.6.3-rc1")
    assert not any(partial_updates_in(v) for v in ("milvus_lite-2.5.1", "v2.5.4", "", "unknown"))


def test_a_cheap_embedder_embeds_small_calls_at_once_and_sends_bulk_calls_to_the_worker(tmp_path: Path) -> None:
    """ACN_EMBEDDING_BACKLOG=auto with USE/hash: a record_turn-sized save is dense-searchable when it returns; a
    bulk import is written at once with its vectors pending (100 a call was 466 vs 1,747 items/s with USE)."""
    store = MilvusStore(str(tmp_path / "memory.db")).open()
    try:
        repository = MemoryRepository(store, prefix="bk", embedder=HashEmbedder(), embed_later=True, inline_rows=2)
        repository.open()
        pending: list[list[tuple[str, str]]] = []
        repository.on_pending = lambda tenant, rows: pending.append(rows)
        repository.save("default", [memory(i, TEXTS[i]) for i in range(2)])
        assert pending == [] and {stored(repository)[f"m{i}"][EMBEDDED_FIELD] for i in range(2)} == {1}
        bulk = [memory(10 + i, f"{TEXTS[i % len(TEXTS)]} #{i}") for i in range(5)]
        repository.save("default", bulk)
        assert [len(rows) for rows in pending] == [5]
        rows = stored(repository)
        assert {rows[m.id][EMBEDDED_FIELD] for m in bulk} == {0}
        found = repository.search("default", "reconciliation timeout", Filter(""), limit=10, within=NS)
        assert "m10" in {hit.memory.id for hit in found}  # BM25 finds the pending rows at once
    finally:
        store.close()


def test_auto_runs_the_worker_for_a_cheap_embedder_with_its_inline_limit(tmp_path: Path) -> None:
    from acn.common.settings import Settings
    from acn.providers.embedding_setup import embeds_in_background, inline_rows

    cheap = HashEmbedder()
    assert embeds_in_background(Settings(embedder="hash"), cheap)
    assert inline_rows(Settings(embedder="hash"), cheap) == 16
    assert inline_rows(Settings(embedder="hash", embedding_inline_max=3), cheap) == 3
    assert inline_rows(Settings(embedder="hash", embedding_backlog="on"), cheap) == 0
    assert not embeds_in_background(Settings(embedder="hash", embedding_backlog="off"), cheap)
    app = create_app(make_settings(tmp_path, embedder="hash", embedding_inline_max=3))
    runtime = app.extensions["acn"]
    try:
        assert runtime.backlog is not None and runtime.memories.inline_rows == 3
        client = app.test_client()
        ns = {"agent_id": "bulk", "session_id": "s1"}
        items = [{"content": f"{TEXTS[i % len(TEXTS)]} (item {i})", "kind": "fact"} for i in range(8)]
        response = post(client, "memory_write", {**ns, "items": items})
        assert response.status_code == 200, response.get_data(as_text=True)
        assert runtime.backlog.drain(timeout=30)
        assert {row[EMBEDDED_FIELD] for row in stored(runtime.memories).values()} == {1}
    finally:
        runtime.close()


def test_the_worker_reads_its_rows_by_primary_key_alone(opened: tuple[MilvusStore, MemoryRepository]) -> None:
    # Lite scans the whole collection for `tenant == … and id in …` (0.3-1 s at 100k rows), and the worker reads
    # under write_order, where every save waits: its reads by id are primary-key lookups.
    store, repository = opened
    backlog = EmbeddingBacklog(repository)
    repository.save("t", [memory(i, text) for i, text in enumerate(TEXTS)])
    filters = record_filters(store)
    assert backlog.drain(timeout=30)
    assert {row[EMBEDDED_FIELD] for row in stored(repository).values()} == {1}
    by_id = [template for template in filters if "id in" in template]
    assert by_id and set(by_id) == {"id in {pk_ids}"}


def test_the_worker_waits_for_requests_to_stop_before_it_embeds(opened: tuple[MilvusStore, MemoryRepository]) -> None:
    # With Lite the worker's store work is Python in the server's process: a scan for waiting rows at 100k rows
    # (0.1-0.7 s) made the first search after a restart 274-612 ms instead of 137-206. So while a request is being
    # handled (the server wraps each in READS.foreground), the worker does not start a batch; once requests stop
    # for QUIET_SECONDS it does. Before: it started QUIET_SECONDS after the last write, whatever was being served.
    from acn.storage.database.lite.read_priority import READS

    _, repository = opened
    backlog = EmbeddingBacklog(repository, max_defer=60.0).start()
    try:
        with READS.foreground():  # a request being handled, for longer than QUIET_SECONDS
            repository.save("t", [memory(i, text) for i, text in enumerate(TEXTS)])
            time.sleep(0.6)
            assert backlog.filled == 0 and backlog.queued() == len(TEXTS)
        assert backlog.drain(timeout=30)
        assert backlog.filled == len(TEXTS)
        assert {row[EMBEDDED_FIELD] for row in stored(repository).values()} == {1}
    finally:
        backlog.stop()


def test_unbroken_requests_only_defer_the_worker(opened: tuple[MilvusStore, MemoryRepository]) -> None:
    # Under traffic that never pauses the backlog still drains: a batch waits max_defer seconds at most.
    from acn.storage.database.lite.read_priority import READS

    _, repository = opened
    backlog = EmbeddingBacklog(repository, max_defer=0.2).start()
    try:
        with READS.foreground():
            repository.save("t", [memory(i, text) for i, text in enumerate(TEXTS)])
            assert backlog.drain(timeout=30)
            assert backlog.filled == len(TEXTS)
    finally:
        backlog.stop()
