"""One agent's memory growing (issue 21): dedup exact and batched at any size, the first search not waiting for the
session's index, the read cache's byte budget, and no per-session or per-agent map that only grows."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

import acn.storage.repositories.clock
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.memory.items import MemoryItem
from acn.memory.write import write_items
from acn.storage.database.base import Filter
from acn.storage.database.memory_rows import kinds_filter, live_filter, new_memory_id, scope_filter
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import post, record_filters

AGENT = Namespace(agent_id="grown", session_id="main")


def filler(index: int, namespace: Namespace = AGENT) -> Memory:
    """Return memory number `index`: addresses alike but for their numbers (near one another, never equal)."""
    text = f"客户{index}号的收货地址是上海市浦东新区张江路{index}号，联系人张伟，工作日送货"
    return Memory(id=new_memory_id(), kind="fact", content=text, scope="session", agent_id=namespace.agent_id,
                  session_id=namespace.session_id, created_at=index + 1, updated_at=index + 1, version=1,
                  importance=5.0)


def fill(memories: MemoryRepository, count: int, namespace: Namespace = AGENT) -> list[Memory]:
    stored = [filler(i, namespace) for i in range(count)]
    for start in range(0, count, 1000):
        batch = stored[start: start + 1000]
        memories.save(DEFAULT_TENANT, batch, new_ids={m.id for m in batch})
    memories.store.flush()
    return stored


@pytest.mark.parametrize("size", [10_000, pytest.param(100_000, marks=pytest.mark.slow)])
def test_a_duplicate_written_as_the_last_item_of_a_large_namespace_is_merged(fresh_app: Flask, size: int) -> None:
    memories: MemoryRepository = fresh_app.extensions["acn"].memories
    stored = fill(memories, size - 3)
    middle = stored[4321]  # no other number here has its bigrams (500 and 5000 do share theirs: a tie)
    items = [{"kind": "fact", "content": "客户的发票抬头是星辰科技有限公司"},  # new
             {"kind": "fact", "content": middle.content + "3楼"},  # a near-duplicate: an update in place
             {"kind": "fact", "content": "  " + stored[3].content.replace("，", ", ") + "。"}]  # the same text
    results = post(fresh_app.test_client(), "memory_write", {"agent_id": AGENT.agent_id,
                                                             "session_id": AGENT.session_id,
                                                             "items": items}).get_json()["results"]
    assert [r["action"] for r in results] == ["added", "updated", "duplicate"]
    assert results[1]["id"] == middle.id and results[1]["version"] == 2
    assert results[2]["id"] == stored[3].id


def test_a_batch_in_a_large_namespace_is_saved_in_one_write(fresh_app: Flask) -> None:
    # Past 2,000 live memories each item used to search the store and save alone: 100 saves for 100 items.
    memories: MemoryRepository = fresh_app.extensions["acn"].memories
    stored = fill(memories, 2_100)
    saves: list[int] = []
    save = memories.save

    def counted(tenant: str, batch: list[Memory], **kwargs: Any) -> None:
        saves.append(len(batch))
        save(tenant, batch, **kwargs)

    memories.save = counted  # type: ignore[method-assign]
    items = [{"kind": "fact", "content": f"第{i}批次的入库单号是RK-{i * 7919:08d}"} for i in range(99)]
    items.append({"kind": "fact", "content": stored[7].content})
    results = post(fresh_app.test_client(), "memory_write", {"agent_id": AGENT.agent_id,
                                                             "session_id": AGENT.session_id,
                                                             "items": items}).get_json()["results"]
    assert [r["action"] for r in results] == ["added"] * 99 + ["duplicate"]
    assert saves == [99]


def test_a_batch_reads_in_full_only_the_near_duplicates_it_updates(fresh_app: Flask) -> None:
    # A near-duplicate whose numbers the item drops is another fact (the item is added): reading it in full before
    # the batch was a store query per batch for nothing (most near-duplicates in a large namespace are those).
    memories: MemoryRepository = fresh_app.extensions["acn"].memories
    stored = fill(memories, 300)
    read: list[str] = []
    rows_by_id = memories.rows_by_id

    def recorded(tenant: str, ids: Any, fields: list[str]) -> Any:
        read.extend(ids)
        return rows_by_id(tenant, ids, fields)

    memories.rows_by_id = recorded  # type: ignore[method-assign]
    others = [filler(i).content for i in range(1000, 1010)]  # near 100..109 but for their numbers
    items = [{"kind": "fact", "content": text} for text in others]
    items += [{"kind": "fact", "content": stored[i].content + "3楼"} for i in (7, 8)]  # updates in place
    results = post(fresh_app.test_client(), "memory_write", {"agent_id": AGENT.agent_id,
                                                             "session_id": AGENT.session_id,
                                                             "items": items}).get_json()["results"]
    assert [r["action"] for r in results] == ["added"] * 10 + ["updated"] * 2
    assert [r["id"] for r in results[10:]] == [stored[7].id, stored[8].id]
    assert sorted(read) == sorted([stored[7].id, stored[8].id])


def test_dedup_reads_a_namespace_past_the_store_query_window(fresh_app: Flask,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The store returns at most QUERY_WINDOW rows a query: a namespace larger than that is read in id ranges.
    memories: MemoryRepository = fresh_app.extensions["acn"].memories
    monkeypatch.setattr(acn.storage.repositories.memories, "QUERY_WINDOW", 64)
    stored = fill(memories, 500)
    where = scope_filter(AGENT).and_(live_filter(False)).and_(kinds_filter(None, exclude_turns=True))
    rows = memories.query_all(DEFAULT_TENANT, where, ["id"])
    assert sorted(r["id"] for r in rows) == sorted(m.id for m in stored)
    late = MemoryItem(kind="fact", content=stored[-1].content)
    early = MemoryItem(kind="fact", content=stored[0].content)
    results = write_items(memories, DEFAULT_TENANT, AGENT, [late, early], 0.9)
    assert [(r.action, r.id) for r in results] == [("duplicate", stored[-1].id), ("duplicate", stored[0].id)]


class SlowGroupLoad(MilvusStore):
    """A real Lite store whose reads of a session's readable rows (an index load) wait until released."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.loading = threading.Event()
        self.release = threading.Event()

    def query(self, collection: str, where: Filter, **kwargs: Any) -> list[dict[str, Any]]:
        if "group_agent" in where.params:
            self.loading.set()
            self.release.wait(60)
        return super().query(collection, where, **kwargs)


def test_the_first_search_is_answered_by_the_store_while_the_index_loads(tmp_path: Path) -> None:
    store = SlowGroupLoad(str(tmp_path / "slow.db")).open()
    # Rows not listed by id (member pages, acn/storage/repositories/memory_heads.py): the index loads by a filtered query.
    memories = MemoryRepository(store, prefix="slow", embedder=None, member_pages=False)
    memories.open()
    # Once the store has been searched (Lite's search structures built): it answers a search meanwhile. Before, a
    # search waits for its session's load instead (tests/test_big_namespace.py).
    store.search_text(memories.spec.name, "仓库", limit=1, where=Filter(""), fields=["id"])
    memories.store_cold = False
    where = scope_filter(AGENT).and_(live_filter(False))
    answers: list[list[str]] = []
    try:
        memories.save(DEFAULT_TENANT, [filler(1), filler(2)])
        memories.save(DEFAULT_TENANT, [Memory(id=new_memory_id(), kind="fact", content="仓库在金桥路", scope="session",
                                              agent_id="grown", session_id="main", created_at=9, updated_at=9,
                                              version=1, importance=5.0)])
        store.flush()
        search = threading.Thread(target=lambda: answers.append(
            [s.memory.content for s in memories.search(DEFAULT_TENANT, "仓库", where, limit=5, within=AGENT)
             if s.bm25 > 0]))
        search.start()
        search.join(30)
        assert not search.is_alive(), "the search waited for the index to load"
        assert answers == [["仓库在金桥路"]]
        assert store.loading.wait(30)  # the load is under way, on another thread
        assert memories.cache is not None and memories.cache.indexes == {}
    finally:
        store.release.set()
    try:
        assert memories.cache.settle()
        assert list(memories.cache.indexes) == [(DEFAULT_TENANT, "grown", "main")]
        hits = memories.search(DEFAULT_TENANT, "仓库", where, limit=5, within=AGENT)
        assert [s.memory.content for s in hits if s.bm25 > 0] == ["仓库在金桥路"]
    finally:
        store.close()


def test_the_read_cache_keeps_to_its_byte_budget(tmp_path: Path) -> None:
    store = MilvusStore(str(tmp_path / "budget.db")).open()
    budget = 60_000  # rows cost ~1 KB held (local_index.ROW_BYTES): 20 sessions of 11 rows and their pools overflow it
    memories = MemoryRepository(store, prefix="budget", embedder=None, cache_bytes=budget, warm_in_background=False)
    memories.open()
    try:
        sessions = [Namespace(agent_id=f"agent-{i}", session_id="s") for i in range(20)]
        for namespace in sessions:
            memories.save(DEFAULT_TENANT, [filler(j, namespace) for j in range(10)])
        for namespace in sessions:
            where = scope_filter(namespace).and_(live_filter(False))
            assert memories.search(DEFAULT_TENANT, "张江路", where, limit=3, within=namespace)
            write_items(memories, DEFAULT_TENANT, namespace, [MemoryItem(kind="fact", content="仓库在金桥路")], 0.9)
            assert memories.cache is not None and memories.cache.nbytes() <= budget
        assert 0 < len(memories.cache.indexes) < len(sessions)
    finally:
        store.close()


def test_per_session_clocks_and_per_agent_locks_do_not_pile_up(fresh_app: Flask,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    memories: MemoryRepository = fresh_app.extensions["acn"].memories
    monkeypatch.setattr(acn.storage.repositories.clock, "CLOCK_SESSIONS", 50)
    for i in range(200):
        namespace = Namespace(agent_id=f"agent-{i}", session_id=f"s-{i}")
        memories.now_ms(DEFAULT_TENANT, namespace)
        with memories.namespace_lock(DEFAULT_TENANT, namespace):
            pass
    gc.collect()
    assert len(memories._clock._last_ms) <= 50
    assert len(memories._locks._locks) == 0


def test_a_session_clock_continues_past_rows_stamped_ahead_of_the_wall_clock(tmp_path: Path) -> None:
    # After a restart a session's first stamp comes after its latest stored one, even when that one is ahead of
    # the wall clock (a batch stamps items faster than one per ms; a clock set back).
    store = MilvusStore(str(tmp_path / "clock.db")).open()
    try:
        ahead = int(time.time() * 1000) + 600_000
        first = MemoryRepository(store, prefix="clock", embedder=None)
        first.open()
        memory = filler(1).model_copy(update={"created_at": ahead, "updated_at": ahead})
        first.save(DEFAULT_TENANT, [memory, filler(2)])
        restarted = MemoryRepository(store, prefix="clock", embedder=None)
        assert restarted.now_ms(DEFAULT_TENANT, AGENT) == ahead + 1
        other = Namespace(agent_id=AGENT.agent_id, session_id="another")
        assert restarted.now_ms(DEFAULT_TENANT, other) < ahead
    finally:
        store.close()


def test_a_dedup_pool_kept_against_a_server_sees_what_other_processes_wrote_and_deleted(lite_server: str) -> None:
    # Two repositories on one Milvus server are two processes: each keeps its pool of the namespace between
    # batches and must still see the other's new rows (read since its watermark) and deletes (confirmed on use).
    first_store, second_store = MilvusStore(lite_server).open(), MilvusStore(lite_server).open()
    try:
        first = MemoryRepository(first_store, prefix="shared21", embedder=None)
        second = MemoryRepository(second_store, prefix="shared21", embedder=None)
        first.open()
        second.open()
        namespace = Namespace(agent_id="two-processes", session_id="s")
        item = MemoryItem(kind="fact", content="仓库地址在张江路100号")
        other = MemoryItem(kind="fact", content="发票抬头是星辰科技有限公司")
        mine = write_items(first, DEFAULT_TENANT, namespace, [item], 0.9)[0]
        assert len(first.kept._shared) == 1  # kept for the next batch
        theirs = write_items(second, DEFAULT_TENANT, namespace, [other], 0.9)[0]
        again = write_items(first, DEFAULT_TENANT, namespace, [other, item], 0.9)
        assert [(r.action, r.id) for r in again] == [("duplicate", theirs.id), ("duplicate", mine.id)]
        second.delete_ids(DEFAULT_TENANT, [mine.id])
        after = write_items(first, DEFAULT_TENANT, namespace, [item], 0.9)[0]
        assert after.action == "added" and after.id != mine.id
    finally:
        first_store.close()
        second_store.close()


def test_rows_are_read_by_primary_key_alone_and_stay_within_their_tenant(tmp_path: Path) -> None:
    # Lite scans the whole collection for any clause but `id in [...]` (~0.4 s at 100k rows, once per write batch
    # that updates): the repository's reads by id send the primary-key lookup alone and check the tenant itself.
    store = MilvusStore(str(tmp_path / "pk.db")).open()
    memories = MemoryRepository(store, prefix="pk", embedder=None)
    memories.open()
    try:
        mine, theirs = filler(1), filler(2)
        memories.save(DEFAULT_TENANT, [mine])
        memories.save("other-tenant", [theirs])
        filters = record_filters(store)
        assert [m.id for m in memories.get_many(DEFAULT_TENANT, [mine.id, theirs.id])] == [mine.id]
        assert memories.get(DEFAULT_TENANT, theirs.id) is None
        assert memories.get("other-tenant", theirs.id) is not None
        assert memories.get("other-tenant", mine.id) is None  # ids are scoped by tenant: nothing to find there
        assert filters and set(filters) == {"id in {pk_ids}"}
    finally:
        store.close()
