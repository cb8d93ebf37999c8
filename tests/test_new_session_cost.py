"""A new chat costs the same whatever else the store holds (issue 33): store calls and rows read, counted.

Milvus Lite answers a scalar filter by scanning every row of the collection (STORAGE.md, "Learned since"); only a
filter that is exactly `id in [...]` is a primary-key lookup. So the rows a call reads are counted here as: the ids
it names for a primary-key lookup, every row of the collection for anything else (a filtered query, a search, a
delete). A new session's first memory_write, record_turn and assemble must read as many with 0 rows in other
namespaces as with many.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.server import create_app
from acn.storage.base import Filter, MemoryStore
from acn.storage.memories import MemoryRepository
from acn.storage.memory_rows import new_memory_id, scope_filter
from acn.storage.milvus import MilvusStore
from tests.conftest import make_settings, post

PRIMARY_KEY = re.compile(r"id in \{\w+\}")
OTHERS = 600  # rows in other namespaces: enough that a scan cannot read as few as a key lookup


class Counted:
    """Every call a store gets, with the rows it reads (see the module's notes)."""

    def __init__(self, store: MemoryStore) -> None:
        self.calls: list[tuple[str, str, int, bool]] = []  # method, collection, rows read, a scan
        self._store = store
        self._originals: dict[str, Any] = {}
        for name in ("query", "search_text", "search_dense", "delete", "upsert", "insert", "update_fields"):
            original = getattr(store, name)
            self._originals[name] = original
            setattr(store, name, self._wrap(name, original))

    def _wrap(self, name: str, original: Any) -> Any:
        def counted(collection: str, *args: Any, **kwargs: Any) -> Any:
            where = kwargs.get("where", args[0] if args and isinstance(args[0], Filter) else None)
            if name in ("upsert", "insert", "update_fields"):
                read, scan = 0, False
            elif name in ("query", "delete") and where is not None and PRIMARY_KEY.fullmatch(where.template):
                read, scan = len(next(iter(where.params.values()))), False
            else:
                read, scan = self.rows_in(collection), True
            self.calls.append((name, collection, read, scan))
            return original(collection, *args, **kwargs)
        return counted

    def rows_in(self, collection: str) -> int:
        return len(self._originals["query"](collection, Filter(""), fields=["id"], limit=16_384))

    def rows_read(self) -> int:
        return sum(call[2] for call in self.calls)



def other_rows(count: int, sessions: int = 6) -> list[Memory]:
    now = int(time.time() * 1000) - 60_000
    return [Memory(id=new_memory_id(), kind="fact", content=f"订单ORD-{i:06d}的退款金额是{i % 500}元",
                   scope="session", agent_id=f"other-{i % sessions}", session_id=f"chat-{i % sessions}",
                   created_at=now + i, updated_at=now + i, version=1, importance=5.0) for i in range(count)]


@pytest.fixture(params=[0, OTHERS], ids=["empty", "others"])
def store_of(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Flask]:
    """An app whose store holds 0 or OTHERS memories of other agents' sessions (and their session versions)."""
    app = create_app(make_settings(tmp_path))
    runtime = app.extensions["acn"]
    if request.param:
        runtime.memories.save(DEFAULT_TENANT, other_rows(request.param))
        client = app.test_client()
        for session in range(3):
            post(client, "record_turn", {"agent_id": f"other-{session}", "session_id": f"chat-{session}",
                                         "messages": [{"role": "user", "content": "我的订单号是ORD-000123"}]})
        runtime.store.flush()
    if runtime.memories.warming is not None:
        runtime.memories.warming.join()
    if runtime.memories.cache is not None:
        runtime.memories.cache.settle()
    yield app
    runtime.close()


FIRST_CALLS = {
    "memory_write": {"items": [{"kind": "fact", "content": "客户的会员等级是金卡"}]},
    "record_turn": {"messages": [{"role": "user", "content": "帮我查一下订单ORD-000777的物流"},
                                 {"role": "assistant", "content": "好的，订单ORD-000777已发货"}]},
    "assemble": {"user_input": "订单ORD-000777到哪了", "mode": "focused"},
}
MEASURED: dict[tuple[str, int], int] = {}


@pytest.mark.parametrize("node", list(FIRST_CALLS))
def test_a_new_sessions_first_call_reads_no_row_of_other_namespaces(store_of: Flask, node: str,
                                                                    request: pytest.FixtureRequest) -> None:
    runtime = store_of.extensions["acn"]
    counted = Counted(runtime.store)
    response = store_of.test_client().post(f"/v1/nodes/{node}", json={
        "agent_id": f"new-agent-{node}", "session_id": "new-chat", **FIRST_CALLS[node]})
    assert response.status_code == 200, response.get_json()
    if runtime.memories.cache is not None:
        runtime.memories.cache.settle()  # a load the call started in the background is its cost too
    # Only primary-key lookups: what a scan reads grows with the other namespaces' rows.
    assert [call for call in counted.calls if call[3]] == []
    # And no more ids than with an empty store (fewer may be asked when a head the other sessions' calls read
    # is held in process: the tenant's "no shared rows").
    MEASURED[(node, request.node.callspec.params["store_of"])] = counted.rows_read()
    if (node, 0) in MEASURED and (node, OTHERS) in MEASURED:
        assert MEASURED[(node, OTHERS)] <= MEASURED[(node, 0)] <= 8


def test_a_new_session_of_a_known_agent_still_reads_the_agents_rows(fresh_app: Flask) -> None:
    # The fast path says "nothing to read" only when no head names the session, its agent or its tenant's shared
    # rows: an agent-scope memory written from one session is read by the agent's next session.
    client = fresh_app.test_client()
    for agent, session, scope, content in (("agent-a", "first", "agent", "客户喜欢顺丰快递"),
                                           ("agent-b", "x", "shared", "门店营业时间是早九点到晚九点")):
        written = post(client, "memory_write", {"agent_id": agent, "session_id": session,
                                                "items": [{"kind": "preference", "content": content, "scope": scope}]})
        assert written.status_code == 200, written.get_json()
    for agent, session, query, expected in (("agent-a", "second", "快递", "客户喜欢顺丰快递"),
                                            ("agent-c", "y", "营业时间", "门店营业时间是早九点到晚九点")):
        found = post(client, "memory_retrieve", {"agent_id": agent, "session_id": session, "query": query})
        assert [m["content"] for m in found.get_json()["memories"]] == [expected]


def test_rows_written_before_heads_existed_are_read_and_readyz_says_when_their_heads_are_built(
        tmp_path: Path) -> None:
    # An earlier release's store: memories, no heads collection. Until the background pass has written their
    # heads, no session is taken for empty (and /readyz answers 503); afterwards the old session's clock and reads
    # still see its rows.
    settings = make_settings(tmp_path)
    app = create_app(settings)
    old = Namespace(agent_id="old-agent", session_id="old-chat")
    runtime = app.extensions["acn"]
    ahead = int(time.time() * 1000) + 3_600_000  # a clock set back since: the old rows are ahead of it
    row = other_rows(1)[0].model_copy(update={"agent_id": old.agent_id, "session_id": old.session_id,
                                              "created_at": ahead, "updated_at": ahead})
    runtime.memories.save(DEFAULT_TENANT, [row])
    heads = runtime.memories.heads.spec.name
    runtime.close()
    reopened = MilvusStore(settings.milvus_uri).open()
    reopened._require().drop_collection(heads)  # as an earlier release left the store
    reopened.close()

    app = create_app(settings)
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        if runtime.memories.heads.building is not None:
            # It may already be done; if not, readiness says so.
            status = client.get("/readyz").status_code
            assert status in (200, 503)
            runtime.memories.heads.building.join(60)
        assert runtime.warmer is not None and runtime.warmer.done.wait(60)  # then recent sessions are warmed
        assert client.get("/readyz").status_code == 200 and client.get("/readyz").get_json()["ready"] is True
        assert runtime.memories.now_ms(DEFAULT_TENANT, old) == ahead + 1
        found = runtime.memories.find(DEFAULT_TENANT, scope_filter(old), limit=10, within=old)
        assert [m.id for m in found] == [row.id]
    finally:
        runtime.close()


def test_another_replica_writing_a_session_is_seen_by_one_that_found_it_empty(lite_server: str) -> None:
    # Against a server other processes write too: a session found empty is asked again (by primary key) next time.
    first, second = (MilvusStore(lite_server).open() for _ in range(2))
    try:
        prefix = "r" + new_memory_id()[4:12]
        a, b = (MemoryRepository(store, prefix=prefix, embedder=None) for store in (first, second))
        a.open()
        b.open()
        ns = Namespace(agent_id="shared-agent", session_id="chat")
        assert a.find(DEFAULT_TENANT, scope_filter(ns), limit=10, within=ns) == []
        written = other_rows(1)[0].model_copy(update={"agent_id": ns.agent_id, "session_id": ns.session_id})
        b.save(DEFAULT_TENANT, [written])
        assert [m.id for m in a.find(DEFAULT_TENANT, scope_filter(ns), limit=10, within=ns)] == [written.id]
        assert a.now_ms(DEFAULT_TENANT, ns) > written.updated_at
    finally:
        first.close()
        second.close()


def test_a_sessions_rows_after_a_restart_are_loaded_by_id_whatever_else_the_store_holds(tmp_path: Path) -> None:
    # On a Lite file each row is listed in its session's (or agent's, or the tenant's shared) member pages: after a
    # restart a session that has rows loads them by primary key, and its first write and reads scan nothing.
    settings = make_settings(tmp_path)
    app = create_app(settings)
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    written = [row.model_copy(update={"agent_id": mine.agent_id, "session_id": mine.session_id})
               for row in other_rows(30)]
    runtime = app.extensions["acn"]
    runtime.memories.save(DEFAULT_TENANT, other_rows(OTHERS) + written)
    agent_row = other_rows(1)[0].model_copy(update={"agent_id": mine.agent_id, "session_id": "elsewhere",
                                                    "scope": "agent"})
    runtime.memories.save(DEFAULT_TENANT, [agent_row])
    runtime.close()

    app = create_app(settings)
    runtime = app.extensions["acn"]
    try:
        assert runtime.memories.warming is None  # no start-up search on a Lite file with in-process indexes
        assert runtime.warmer is not None and runtime.warmer.done.wait(60)  # its own reads are not the calls'
        counted = Counted(runtime.store)
        client = app.test_client()
        for node in FIRST_CALLS:
            response = client.post(f"/v1/nodes/{node}", json={**mine.model_dump(exclude_none=True),
                                                               **FIRST_CALLS[node]})
            assert response.status_code == 200, response.get_json()
        runtime.memories.cache.settle()
        assert [call for call in counted.calls if call[3]] == []
        found = runtime.memories.find(DEFAULT_TENANT, scope_filter(mine), limit=100, within=mine)
        assert {row.id for row in written} | {agent_row.id} <= {m.id for m in found}
    finally:
        runtime.close()


def test_member_pages_a_server_process_left_stale_are_rebuilt_before_they_are_trusted(tmp_path: Path) -> None:
    # A process that writes the store as one of several (no member pages kept) marks them stale; a Lite process
    # opening it afterwards lists every row again in the background, /readyz naming the work, before any session
    # index is loaded by id.
    from acn.storage.memory_heads import MemoryHeads
    from acn.storage.memory_rows import stored_ids, to_record

    settings = make_settings(tmp_path)
    mine = Namespace(agent_id="agent", session_id="chat")
    first, second = (row.model_copy(update={"agent_id": mine.agent_id, "session_id": mine.session_id})
                     for row in other_rows(2))
    app = create_app(settings)
    app.extensions["acn"].memories.save(DEFAULT_TENANT, [first])
    prefix, collection = settings.collection_prefix, app.extensions["acn"].memories.spec.name
    app.extensions["acn"].close()

    store = MilvusStore(settings.milvus_uri).open()
    shared_writer = MemoryHeads(store, prefix=prefix, exclusive=False)
    shared_writer.open(memories_existed=True, scan=lambda fields: [], background=False)
    shared_writer.note_save(DEFAULT_TENANT, [second])
    store.upsert(collection, [to_record(second, DEFAULT_TENANT, None)])
    store.close()

    app = create_app(settings)
    runtime = app.extensions["acn"]
    try:
        assert runtime.memories.heads.building is not None  # the pages were not trusted as they stood
        runtime.memories.heads.building.join(60)
        assert runtime.warmer is not None and runtime.warmer.done.wait(60)  # then recent sessions are warmed
        assert app.test_client().get("/readyz").get_json()["pending"] == []
        assert sorted(runtime.memories.heads.member_ids(DEFAULT_TENANT, mine) or []) == stored_ids(DEFAULT_TENANT, [first.id, second.id])
        found = runtime.memories.find(DEFAULT_TENANT, scope_filter(mine), limit=10, within=mine)
        assert sorted(m.id for m in found) == sorted([first.id, second.id])
    finally:
        runtime.close()
