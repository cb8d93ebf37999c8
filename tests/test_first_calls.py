"""A restarted server's first calls (issue 47): what a first call used to pay for once per process is done before
ready, or not at all."""

from __future__ import annotations

import gc
import random
import threading
from pathlib import Path
from typing import Any

import pytest
from pymilvus.client.cache import GlobalCache, SchemaCache
from pymilvus.client.grpc_handler import GrpcHandler
from pymilvus.client.utils import SciPyHelper

from acn.app.warmer import Warmer
from acn.common.models import Namespace
from acn.memory.items import MemoryItem
from acn.memory.write import new_memory
from acn.server import create_app
from acn.storage.database.base import CollectionSpec, Filter
from acn.storage.database.lite import local_index
from acn.storage.database.lite.local_index import LocalIndex
from acn.storage.database.lite.predicate import predicate
from acn.storage.database.memory_rows import group_filter, kinds_filter, live_filter, tenant_filter, to_record
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import make_settings
from tests.test_local_index import random_memory
from tests.test_start_warming import rows_of, stored_then_restarted, warmed


def test_start_up_makes_pymilvus_sparse_input_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # pymilvus imports scipy.sparse the first time an insert asks whether a field is a sparse matrix (0.2-0.7 s, under
    # the store's write lock): start-up asks first, so a restarted server's first write does not.
    monkeypatch.setattr(SciPyHelper, "_checked", False)
    app = create_app(make_settings(tmp_path))
    try:
        assert SciPyHelper._checked
    finally:
        app.extensions["acn"].close()


def test_the_warm_pass_ends_with_a_full_garbage_collection_before_ready(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # The pass leaves many new long-lived objects: the full collection they make due ran inside the first request
    # that allocated after ready (80-126 ms of CPU at 10k memories). The pass makes it itself, before done.
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    events: list[str] = []  # on the pass's thread: each session warmed, each full collection
    warm = Warmer.warm

    def warm_noted(self: Warmer, tenant: str, namespace: Namespace) -> None:
        warm(self, tenant, namespace)
        events.append("warmed")

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2 and threading.current_thread().name == "acn-start-warm":
            events.append("full collection")

    monkeypatch.setattr(Warmer, "warm", warm_noted)
    gc.callbacks.append(note)
    try:
        app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 40)])
        try:
            assert warmed(runtime).warmed == 1
            assert "warmed" in events and events[-1] == "full collection"
        finally:
            runtime.close()
    finally:
        gc.callbacks.remove(note)


def counted_index(monkeypatch: pytest.MonkeyPatch, seed: int) -> tuple[random.Random, list[dict[str, Any]],
                                                                        LocalIndex, list[int]]:
    """Return 2,000 random rows of two tenants in an index, and the list each predicate test of a row appends to."""
    rng = random.Random(seed)
    memories = [random_memory(rng, i) for i in range(2000)]
    records = [{**to_record(m, rng.choice(("t1", "t2")), None), "id": m.id} for m in memories]
    index = LocalIndex(0)
    for record in records:
        index.put_row(record, tokenize=False)
    tested: list[int] = []
    real = local_index.tuple_predicate

    def counted(where: Filter, positions: tuple[str, ...]) -> Any:
        matches = real(where, positions)

        def test(row: tuple[Any, ...]) -> bool:
            tested.append(1)
            return matches(row)
        return test

    monkeypatch.setattr(local_index, "tuple_predicate", counted)
    return rng, records, index, tested


def test_a_new_filter_is_tested_once_per_distinct_value_of_the_fields_it_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # A new filter's mask tested the predicate (a tree of Python closures, ~5-20 us) on every row: the warmer's six
    # filters at 10k rows, and any first call asking a new one. Its answer depends on the fields it reads alone.
    rng, records, index, tested = counted_index(monkeypatch, 47)
    session = tenant_filter("t1").and_(group_filter("a1", "s1"))
    for where in (session, session.and_(kinds_filter(["fact", "decision"], exclude_turns=True)).and_(live_filter(False)),
                  Filter('kind == "turn" or not (importance > 1.0)'), Filter("created_at < {at}", {"at": 1000})):
        tested.clear()
        selected = {m.id for m in index.select(where)}
        assert selected == {str(r["id"]) for r in records if predicate(where)(r)}, where.template
        fields = {tuple(r.get(f) for f in local_index.read_fields(where)) for r in records}
        # once per distinct combination; row by row where most rows differ (created_at: every row)
        assert len(tested) == (len(fields) if len(fields) <= 0.25 * len(records) + 16 else len(records))


def test_a_filter_that_lists_ids_tests_only_the_rows_it_lists(monkeypatch: pytest.MonkeyPatch) -> None:
    # After a supersede, the next assemble reads the successors by id (assembly/current.py stale_values): a filter
    # that reads the id was tested row by row over the whole namespace, ~25 ms at 8.4k rows (bench.scale's first
    # assemble after a restart, behind a memory_write). The rows it lists are found by id and tested alone.
    rng, records, index, tested = counted_index(monkeypatch, 48)
    wanted = [str(r["id"]) for r in rng.sample(records, 30)] + ["mem_not-held"]
    listed = Filter("id in {succ}", {"succ": wanted})
    session = tenant_filter("t1").and_(group_filter("a1", "s1"))
    for where, by_id in ((tenant_filter("t1").and_(listed).and_(group_filter("a1", "s1")), True),
                         (listed, True), (session.and_(listed.and_(live_filter(False))), True),
                         (Filter('id in {succ} or kind == "fact"', {"succ": wanted}), False)):
        tested.clear()
        selected = {m.id for m in index.select(where)}
        assert selected == {str(r["id"]) for r in records if predicate(where)(r)}, where.template
        assert (len(tested) <= 30) is by_id, where.template  # an `or` may match rows it does not list

def test_prepared_writes_describe_no_collection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A process's first upsert into a collection and its first insert into the memories collection each asked the
    # store to describe it (pymilvus's schema cache, the column insert): ~20 ms of a restarted server's first
    # record_turn. The start-up warmer has them fetched first (MilvusStore.prepare_writes).
    store = MilvusStore(str(tmp_path / "memory.db")).open()
    try:
        for name in ("rows", "heads"):
            store.ensure(CollectionSpec(name=name, scalar_fields={"n": "int64"}, text_field="text"))
        monkeypatch.setattr(GlobalCache, "schema", SchemaCache())  # as a new process: nothing cached
        store.prepare_writes("rows")
        described: list[str] = []
        describe = GrpcHandler.describe_collection

        def counted(self: GrpcHandler, collection_name: str, *args: Any, **kwargs: Any) -> Any:
            described.append(collection_name)
            return describe(self, collection_name, *args, **kwargs)

        monkeypatch.setattr(GrpcHandler, "describe_collection", counted)
        store.insert("rows", [{"id": "a", "text": "first", "n": 1}])
        store.upsert("heads", [{"id": "h", "text": "head", "n": 2}])
        store.upsert("rows", [{"id": "a", "text": "again", "n": 3}])
        assert described == []
    finally:
        store.close()


def test_a_lite_files_flush_waits_for_a_request_still_writing_after_a_quiet_spell(tmp_path: Path) -> None:
    # A process up for an hour, its last flush long ago: the first record_turn's first write used to make the
    # flush due at once (timed from the last flush), and its next writes waited behind it. Now a Lite file's flush
    # waits while the request writes (QUIET_SECONDS) unless its oldest unflushed write is flush_interval old.
    from acn.storage.database.flushing import QUIET_SECONDS

    store = MilvusStore(str(tmp_path / "memory.db"), flush_every=10_000, flush_interval=5.0).open()
    try:
        repository = MemoryRepository(store, prefix="fw", embedder=None)
        repository.open()
        store.flush()
        flushes = store.flushes  # the store's flush policy (acn/storage/database/flushing.py)
        flushes._last_flush -= 3600  # noqa: SLF001  (an hour since: no wait for the clock)
        ns = Namespace(agent_id="kefu", session_id="chat")
        repository.save("t1", [new_memory(ns, MemoryItem(kind="fact", content="订单 33622"), repository.now_ms("t1", ns))])
        written = flushes._last_write  # noqa: SLF001
        assert not flushes._flush_due(written + QUIET_SECONDS / 4)  # noqa: SLF001  (still writing)
        assert flushes._flush_due(written + QUIET_SECONDS * 1.5)  # noqa: SLF001  (the writes paused)
        flushes._requests_unflushed = 0  # noqa: SLF001  (background writes alone: the timer's turn)
        assert not flushes._flush_due(written + 4.0)  # noqa: SLF001
        assert flushes._flush_due(written + 5.5)  # noqa: SLF001
    finally:
        store.close()
