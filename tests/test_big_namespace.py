"""A namespace larger than what a request's thread loads is still held in process (issue 33's namespace of 100k).

A session index is loaded by id on the request's thread up to LISTED_LOAD_ROWS rows (20,000); a larger one, up to
ACN_LOCAL_INDEX_ROWS (and within ACN_READ_CACHE_MB), loads by id on a background thread: after a large write, or
by the start-up warmer (/readyz waits for it). The bound is made small here (monkeypatched, as test_restart_warm
makes LOAD_PAGE small) so that the namespaces stay small and the tests take seconds. Store calls are counted as
tests/test_new_session_cost.py counts them: a primary-key lookup reads the ids it names, anything else is a scan.
"""

from __future__ import annotations

import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

import acn.app.warmer
import acn.storage.database.lite.held
import acn.storage.database.lite.index_loads
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Namespace
from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.lite.local_index import LocalIndex
from acn.storage.database.memory_rows import (
    from_record,
    group_filter,
    live_filter,
    scope_filter,
    tenant_filter,
    to_record,
)
from acn.storage.repositories.memory_queries import scope_key
from acn.text.terms import bm25_tokens
from tests.conftest import make_settings, post
from tests.test_new_session_cost import Counted, other_rows
from tests.test_start_warming import needs_index, rows_of, stored_then_restarted, warmed

BIG = Namespace(agent_id="big-agent", session_id="big-chat")
KEY = (DEFAULT_TENANT, BIG.agent_id, BIG.session_id or "")
BOUND = 50  # LISTED_LOAD_ROWS in these tests: BIG holds more rows than a request's thread loads
ROWS = 150


@pytest.fixture(autouse=True)
def small_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acn.storage.database.lite.index_loads, "LISTED_LOAD_ROWS", BOUND)


def body(**extra: object) -> dict[str, object]:
    return {**BIG.model_dump(exclude_none=True), **extra}


@needs_index
def test_after_a_restart_a_namespace_over_the_bound_is_warmed_and_served_in_process(tmp_path: Path) -> None:
    app, runtime = stored_then_restarted(tmp_path, [other_rows(200), rows_of(BIG, ROWS)])
    try:
        assert warmed(runtime).progress()["warmed"] >= 1
        cache = runtime.memories.cache
        assert cache is not None and len(cache.indexes[KEY]) == ROWS
        memories = runtime.memories.spec.name
        client, counted = app.test_client(), Counted(runtime.store)
        # The first write: its dedup pool was built from the index by the warmer, not read by a filtered scan.
        response = post(client, "memory_write", body(items=[{"content": "big-agent 的订单ORD-000007退款7元"},
                                                            {"content": "客户的会员等级是金卡"}]))
        assert [r["action"] for r in response.get_json()["results"]] == ["duplicate", "added"]
        response = post(client, "assemble", body(user_input="订单ORD-000042退款多少", mode="focused"))
        assert response.status_code == 200, response.get_json()
        assert "ORD-000042" in response.get_json()["memory_text"]
        response = post(client, "record_turn", body(messages=[{"role": "user", "content": "订单ORD-000042退款多少"},
                                                              {"role": "assistant", "content": "退款42元"}]))
        assert response.status_code == 200, response.get_json()
        # No search of the store and no scan of the memories: everything came from the process (writes aside).
        assert [c for c in counted.calls if c[1] == memories and (c[0].startswith("search") or c[3])] == []
    finally:
        runtime.close()


@needs_index
def test_a_large_write_loads_the_namespace_by_id_in_the_background(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        memories, cache = runtime.memories, runtime.memories.cache
        memories.save(DEFAULT_TENANT, other_rows(200))
        counted = Counted(runtime.store)
        rows, late = rows_of(BIG, ROWS), rows_of(BIG, 1, start=ROWS)[0]
        lookup = runtime.store.query

        def landing_during_the_load(collection: str, where: Filter, **kwargs: Any) -> Any:
            found = lookup(collection, where, **kwargs)
            if "listed_ids" in where.params and late.id not in done:  # the load's first primary-key lookup
                done.add(late.id)
                memories.save(DEFAULT_TENANT, [late])  # replayed onto the index once it is in (LoadOnce)
            return found

        done: set[str] = set()
        runtime.store.query = landing_during_the_load
        memories.save(DEFAULT_TENANT, rows)  # a batch of WARM_ON_WRITE rows or more starts the load
        where = scope_filter(BIG).and_(live_filter(False))
        # Until it is in, the store answers (a read does not wait for a load that may take seconds).
        hits = memories.search(DEFAULT_TENANT, "ORD-000042", where, limit=3, within=BIG)
        assert hits[0].memory.id == rows[42].id
        assert cache.settle(30)
        assert done and len(cache.indexes[KEY]) == ROWS + 1  # the write that landed during the load is in
        assert cache.indexes[KEY].pending() <= 1  # the rows read were tokenized before it served (not the replayed)
        name = memories.spec.name
        loaded = [c for c in counted.calls if c[1] == name and c[0] == "query"]
        assert loaded and not any(c[3] for c in loaded)  # read by primary key only: no scan of the collection
        counted.calls.clear()
        hits = memories.search(DEFAULT_TENANT, "ORD-000042", where, limit=3, within=BIG)
        assert hits[0].memory.id == rows[42].id and counted.calls == []  # answered in process
        assert [s.memory.id for s in memories.search(DEFAULT_TENANT, f"ORD-{ROWS:06d}", where, limit=1,
                                                     within=BIG)] == [late.id]
    finally:
        runtime.close()


@needs_index
def test_the_index_answers_what_the_store_answers_for_a_large_namespace(tmp_path: Path) -> None:
    app, runtime = stored_then_restarted(tmp_path, [other_rows(200), rows_of(BIG, ROWS)])
    try:
        warmed(runtime)
        memories = runtime.memories
        index = memories.cache.indexes[KEY] if memories.cache else None
        assert index is not None
        where = tenant_filter(DEFAULT_TENANT).and_(scope_filter(BIG)).and_(live_filter(False)).and_(
            group_filter(BIG.agent_id, BIG.session_id))
        stored = memories.store.query(memories.spec.name, where, fields=["id", "content", "created_at"], limit=1000)
        assert sorted(m.id for m in index.select(where)) == sorted(str(r["id"]).split("~")[0] for r in stored)
        for number in (3, 42, 149):
            question = f"订单ORD-{number:06d}退款多少"
            lite = memories.store.search_text(memories.spec.name, question, limit=1, where=where, fields=["id"])
            assert [m.id for m, _ in index.search_text(question, where, 1)] == [h.id.split("~")[0] for h in lite]
        oldest = sorted(stored, key=lambda r: (r["created_at"], r["id"]))[10:15]
        assert [m.content for m in index.select_page(where, offset=10, limit=5)] == [r["content"] for r in oldest]
    finally:
        runtime.close()


def test_a_held_row_costs_what_nbytes_says_and_a_fraction_of_a_memory_object() -> None:
    # tracemalloc over 5,000 short rows as a load reads them: the index's estimate is within 25 % of what it holds,
    # and a row costs well under the ~3.9 KB a held Memory, its fields and its term counts cost before.
    rng, count = random.Random(7), 5000
    rows = [to_record(m, DEFAULT_TENANT, None) for m in rows_of(BIG, count)]
    for i, row in enumerate(rows):
        row["content"] = f"客户{rng.choice('甲乙丙丁')}的订单ORD-{i:06d}退款{rng.randint(1, 500)}元 refund note {i % 97}"
    copies = [{**row, "id": str(row["id"]), "content": str(row["content"])} for row in rows]
    for row in copies:  # the tokenizer's model and its bounded token cache (text_cache_mb) are not the index
        bm25_tokens(row["content"])
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        index = LocalIndex(0)
        for row in copies:  # as a load puts them
            index.put(from_record(row), row)
        index.select(Filter('kind == "fact"'))
        del row
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    shared = sum(len(r["id"]) + 49 + len(r["content"].encode("utf-16-le")) + 74 for r in copies)  # kept by the index
    assert 0.75 <= index.nbytes() / (held + shared) <= 1.25, (index.nbytes(), held + shared)
    assert (held + shared) / count < 1500


@needs_index
def test_the_most_recent_session_stays_warm_when_the_estimates_fall_short(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # Estimates made short (no pool, no text): the warmed take more than ACN_READ_CACHE_MB and the cache pushes the
    # least recently used out. Warmed least recent first, that is the older session's, not the most recent's.
    monkeypatch.setattr(acn.app.warmer, "POOL_ROW_BYTES", 0)
    monkeypatch.setattr(acn.app.warmer, "TEXT_ROW_BYTES", 0)
    older = Namespace(agent_id="older", session_id="chat")
    app, runtime = stored_then_restarted(tmp_path, [rows_of(older, 500, age_ms=120_000), rows_of(BIG, 700)],
                                         read_cache_mb=1)
    try:
        assert warmed(runtime).progress()["warmed"] == 2
        cache = runtime.memories.cache
        assert cache is not None and cache.nbytes() <= 1 << 20
        pool = ("dedup pool", DEFAULT_TENANT, BIG.agent_id, scope_key(BIG, ["session"]))
        assert cache.parked_current(DEFAULT_TENANT, BIG, pool, ["session"])
        assert not cache.parked_current(DEFAULT_TENANT, older,
                                        ("dedup pool", DEFAULT_TENANT, older.agent_id, scope_key(older, ["session"])),
                                        ["session"])
    finally:
        runtime.close()


@needs_index
def test_after_a_restart_nothing_searches_the_store_and_a_cold_namespace_waits_for_its_load(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Lite builds its search structures over every row on its first search (~1.5 KB a row: +440 MB at 300k,
    # bench/results/scale-bigns.md). Start-up made one, and a read of a namespace loading in the background was
    # answered by the store: RSS after a restart was half again what it was before. Now neither: start-up makes no
    # search, and while the store has not been searched a read waits for its session's load, unless the store is
    # small beside the session (the next test): here no store is small enough.
    monkeypatch.setattr(acn.storage.database.lite.held, "STORE_ROWS_PER_LOADED_ROW", 0)
    app, runtime = stored_then_restarted(tmp_path, [other_rows(200), rows_of(BIG, ROWS)], warm_mb=0)
    try:
        assert runtime.memories.warming is None
        cache = runtime.memories.cache
        assert cache is not None and KEY not in cache.indexes  # not warmed: its first read finds it cold
        counted = Counted(runtime.store)
        response = post(app.test_client(), "assemble", body(user_input="订单ORD-000042退款多少", mode="focused"))
        assert response.status_code == 200, response.get_json()
        assert "ORD-000042" in response.get_json()["memory_text"]
        assert len(cache.indexes[KEY]) == ROWS
        assert [call[0] for call in counted.calls if call[0].startswith("search")] == []
    finally:
        runtime.close()


@needs_index
def test_after_a_restart_a_small_store_of_one_large_namespace_answers_its_first_search_at_once(
        tmp_path: Path) -> None:
    # The namespace is nearly all the store: Lite's first search reads less than the namespace's load would
    # (HeldIndexes.store_sooner; bench.peer's 10k namespace: 0.36 s against 2.8 s waiting for the load). The store
    # answers, the load goes on in the background, and the next search is answered by the index.
    app, runtime = stored_then_restarted(tmp_path, [rows_of(BIG, ROWS)], warm_mb=0)
    try:
        cache = runtime.memories.cache
        assert cache is not None and KEY not in cache.indexes
        assert runtime.memories.held is not None and runtime.memories.held.store_sooner(DEFAULT_TENANT, BIG)
        counted = Counted(runtime.store)
        response = post(app.test_client(), "assemble", body(user_input="订单ORD-000042退款多少", mode="focused"))
        assert response.status_code == 200, response.get_json()
        assert "ORD-000042" in response.get_json()["memory_text"]
        assert [call[0] for call in counted.calls if call[0].startswith("search")] == ["search_text"]
        assert cache.settle() and len(cache.indexes[KEY]) == ROWS  # loaded meanwhile, off the request
        counted.calls.clear()
        again = post(app.test_client(), "assemble", body(user_input="订单ORD-000042退款多少", mode="focused"))
        assert again.get_json()["memory_text"] == response.get_json()["memory_text"]
        assert [call[0] for call in counted.calls if call[0].startswith("search")] == []
    finally:
        runtime.close()
