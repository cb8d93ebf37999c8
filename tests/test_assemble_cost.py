"""What a focused assemble reads again on its next call, and that what it keeps in between stays true (issue 28).

On a Lite file this process is the only writer: a session's "archiving" mark read clear and a namespace's standing
memories (identity, constraints, decisions) are kept between calls, and an in-process index keeps the vectors a
dense search allows. Each cached answer is compared with the uncached one, and each write that must invalidate
it is made between two calls. Store calls are counted with tests.test_new_session_cost.Counted (a spy: every
call still reaches the real store).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask import Flask

from acn.common.auth import DEFAULT_TENANT
from acn.common.conversation import group_turns
from acn.common.models import Memory, Message, Namespace
from acn.common.settings_sections.store import StoreSettings
from acn.memory.archive import archive_new_turns
from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.lite import local_index
from acn.storage.database.lite.dense_rows import inner_products, unit_vector
from acn.storage.database.lite.local_index import BUILT_ROWS, LocalIndex
from acn.storage.database.lite.sizes import CACHED_BYTES
from tests.conftest import make_settings, post
from tests.test_new_session_cost import Counted

NS = {"agent_id": "cost-agent", "session_id": "cost-chat"}
FACTS = [
    {"kind": "identity", "content": "我是VIP客户，叫王小明"},
    {"kind": "constraint", "content": "退款只能原路返回"},
    {"kind": "decision", "content": "发票抬头用星辰科技有限公司"},
    {"kind": "fact", "content": "订单ORD-123456的收货地址是上海浦东张江路100号"},
    {"kind": "fact", "content": "大学室友上个月搬去成都了"},
    {"kind": "fact", "content": "大学室友最近转行当律师助理了"},
]
TURNS = [[{"role": "user", "content": "我的订单ORD-123456发到哪里？"},
          {"role": "assistant", "content": "发到上海浦东张江路100号。"}],
         [{"role": "user", "content": "我大学室友搬去成都了"}, {"role": "assistant", "content": "好的，记下了。"}]]
ASK = {**NS, "mode": "focused", "user_input": "搬去成都的那位现在做什么工作？订单发到哪？", "max_tokens": 1000}


def seeded(path: Path, **settings: Any) -> None:
    """Write the session's turns and memories, then close: the next app has not seen this session record a turn."""
    app = create_app(make_settings(path, **settings))
    try:
        client = app.test_client()
        for messages in TURNS:
            assert post(client, "record_turn", {**NS, "messages": messages}).status_code == 200
        assert post(client, "memory_write", {**NS, "items": FACTS}).status_code == 200
    finally:
        app.extensions["acn"].close()


def opened(path: Path, **settings: Any) -> Flask:
    app = create_app(make_settings(path, **settings))
    runtime = app.extensions["acn"]
    if runtime.memories.warming is not None:
        runtime.memories.warming.join()
    if runtime.warmer is not None:
        runtime.warmer.done.wait(60)
    if runtime.memories.cache is not None:
        runtime.memories.cache.settle()
    return app


def unlisted(app: Flask) -> None:
    """Play the time before the start-up list of session heads and marks is taken (tests/test_known_sessions.py):
    what a session has is read by key, and what is remembered of the reads is what is tested."""
    sessions = app.extensions["acn"].sessions
    assert sessions.present.listed.wait(30)
    sessions.present.listed.clear()


def assembled(app: Flask, body: dict[str, Any] | None = None) -> dict[str, Any]:
    response = post(app.test_client(), "assemble", body or ASK)
    assert response.status_code == 200, response.get_json()
    result: dict[str, Any] = response.get_json()
    return {key: result[key] for key in ("messages", "prompt", "sources", "dropped", "tokens")}


def session_reads(counted: Counted, app: Flask) -> list[tuple[str, str, int, bool]]:
    sessions = app.extensions["acn"].sessions.spec.name
    return [call for call in counted.calls if call[1] == sessions]


def test_a_second_assemble_does_not_read_the_sessions_archiving_mark_again(tmp_path: Path) -> None:
    # After a restart the process has not seen the session record a turn: the first assemble reads its archiving
    # mark (one primary-key read), the second none. Before issue 28's change each search of each call read it.
    seeded(tmp_path)
    app = opened(tmp_path)
    try:
        runtime = app.extensions["acn"]
        counted = Counted(runtime.store)
        first = assembled(app)
        assert session_reads(counted, app) != []  # the head and its snapshot (cold), the archiving mark
        counted.calls.clear()
        second = assembled(app)
        assert session_reads(counted, app) == []
        assert second == first
    finally:
        app.extensions["acn"].close()


def test_a_second_assemble_in_a_session_that_never_recorded_a_turn_reads_no_session_row(tmp_path: Path) -> None:
    # Memories written, no turn recorded: the session has no head. Only this process could write one, so "none"
    # is remembered like a head (before: one store read per call for the head, one per search for the mark).
    app = create_app(make_settings(tmp_path))
    try:
        assert post(app.test_client(), "memory_write", {**NS, "items": FACTS}).status_code == 200
    finally:
        app.extensions["acn"].close()
    app = opened(tmp_path)
    try:
        unlisted(app)
        counted = Counted(app.extensions["acn"].store)
        first = assembled(app)
        assert session_reads(counted, app) != []
        counted.calls.clear()
        assert assembled(app) == first
        assert session_reads(counted, app) == []
        recorded = post(app.test_client(), "record_turn", {**NS, "messages": TURNS[0]})
        assert recorded.status_code == 200 and recorded.get_json()["turn"] == 1
        assert "发到上海浦东张江路100号" in assembled(app)["prompt"]  # the new head is what the next call reads
    finally:
        app.extensions["acn"].close()


def test_without_an_in_process_index_the_second_assemble_reads_only_its_searches(tmp_path: Path) -> None:
    # With no session index every read goes to the store: the standing memories' filtered query (a scan on Lite)
    # and the archiving mark are read once, the searches each call.
    seeded(tmp_path, local_index_rows=0)
    app = opened(tmp_path, local_index_rows=0)
    try:
        counted = Counted(app.extensions["acn"].store)
        first = assembled(app)
        counted.calls.clear()
        second = assembled(app)
        assert second == first
        memories = app.extensions["acn"].memories.spec.name
        assert session_reads(counted, app) == []
        assert {name for name, collection, _, _ in counted.calls if collection == memories} <= {"search_text"}
        assert [name for name, _, _, _ in counted.calls if name == "query"] == []
    finally:
        app.extensions["acn"].close()


def test_a_session_that_begins_archiving_after_an_assemble_read_it_clear_hides_the_uncommitted_rows(
        tmp_path: Path) -> None:
    # The assemble remembers the session's mark as clear; a turn then begins archiving (a request killed before
    # its commit leaves exactly this): the next assemble must leave that turn's rows out.
    seeded(tmp_path)
    app = opened(tmp_path)
    runtime = app.extensions["acn"]
    try:
        assembled(app, {**ASK, "user_input": "zebra 订单发到哪？"})
        namespace = Namespace(**NS)
        with runtime.sessions.locked(DEFAULT_TENANT, namespace):
            state = runtime.sessions.head(DEFAULT_TENANT, namespace)
            runtime.sessions.begin_archive(DEFAULT_TENANT, namespace, state)
            killed = [Message(role="user", content="never acknowledged zebra 订单", turn=state.turn + 1)]
            archive_new_turns(runtime.memories, DEFAULT_TENANT, namespace, group_turns(killed, state.turn + 1))
        after = assembled(app, {**ASK, "user_input": "zebra 订单发到哪？", "max_tokens": 2000})
        assert "订单ORD-123456" in after["prompt"]
        assert not any("never acknowledged" in str(m["content"]) for m in after["messages"])
    finally:
        runtime.close()


def test_a_begin_archive_racing_the_read_of_a_clear_mark_is_not_forgotten(tmp_path: Path) -> None:
    # archiving_marks reads without the session lock: a begin_archive may land between its read (no mark) and
    # what it remembers. Played here in that order: the read answers, then the mark is written, then the reader
    # goes on. The session must not be taken for clear afterwards.
    seeded(tmp_path)
    app = opened(tmp_path)
    runtime = app.extensions["acn"]
    try:
        unlisted(app)
        sessions, namespace = runtime.sessions, Namespace(**NS)
        query = runtime.store.query
        raced: list[bool] = []

        def read_then_archive(collection: str, where: Filter, **kwargs: Any) -> Any:
            rows = query(collection, where, **kwargs)
            if collection == sessions.spec.name and where.template == "id in {aids}" and not raced:
                raced.append(True)
                with sessions.locked(DEFAULT_TENANT, namespace):
                    sessions.begin_archive(DEFAULT_TENANT, namespace, sessions.head(DEFAULT_TENANT, namespace))
            return rows

        runtime.store.query = read_then_archive
        pair = (NS["agent_id"], NS["session_id"])
        assert sessions.archiving_marks(DEFAULT_TENANT, [pair]) == {}  # what it read before the mark landed
        assert raced == [True]
        assert sessions.archiving_marks(DEFAULT_TENANT, [pair]) == {pair: 2}
    finally:
        runtime.close()


def test_standing_memories_written_after_an_assemble_are_in_the_next(tmp_path: Path) -> None:
    # The namespace's standing memories are kept between calls; a new one, a superseding one and a delete by this
    # process are seen by the next call, which answers as a process that never cached anything.
    seeded(tmp_path)
    app = opened(tmp_path)
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        before = assembled(app)
        assert "星辰科技" in before["prompt"] and "只能走对公账户" not in before["prompt"]
        written = post(client, "memory_write", {**NS, "items": [{"kind": "constraint", "content": "转账只能走对公账户"}]})
        assert written.status_code == 200
        added = assembled(app)
        assert "转账只能走对公账户" in added["prompt"]
        decision = next(m for m in runtime.memories.queries.standing(DEFAULT_TENANT, Namespace(**NS), ["decision"], limit=10))
        assert client.delete(f"/v1/memories/{decision.id}").status_code == 200
        deleted = assembled(app)
        assert "星辰科技" not in deleted["prompt"]
        runtime.memories.cache.forget_all()  # the uncached answer for the same store
        assert assembled(app) == deleted
    finally:
        runtime.close()


def test_standing_memories_of_another_session_of_the_agent_written_meanwhile_are_seen(tmp_path: Path) -> None:
    # An agent-scope decision written from another session is read by this one: it must invalidate too.
    seeded(tmp_path)
    app = opened(tmp_path)
    try:
        client = app.test_client()
        assert "星辰科技" in assembled(app)["prompt"]
        other = {**NS, "session_id": "cost-other"}
        written = post(client, "memory_write", {**other, "items": [
            {"kind": "decision", "content": "以后都用顺丰发货", "scope": "agent"}]})
        assert written.status_code == 200
        assert "以后都用顺丰发货" in assembled(app)["prompt"]
    finally:
        app.extensions["acn"].close()


def test_the_kept_dense_rows_score_as_a_fresh_copy_and_follow_writes() -> None:
    # The index keeps the vectors a filter allows between searches; a put changes them. Scores are compared to
    # the bit with a search on an index that never searched before.
    rng = np.random.default_rng(7)
    rows = [(f"mem_{n:04x}", rng.standard_normal(16).tolist(), "fact" if n % 3 else "todo") for n in range(300)]

    def index_of(count: int) -> LocalIndex:
        index = LocalIndex(16)
        for memory_id, vector, kind in rows[:count]:
            index.put(memory_of(memory_id, kind), {"id": memory_id, "kind": kind, "dense": vector})
        return index

    where = Filter('kind == "fact"')
    query = rng.standard_normal(16).tolist()
    kept = index_of(250)
    first = kept.search_dense(query, where, 40)
    assert kept.search_dense(query, where, 40) == first == index_of(250).search_dense(query, where, 40)
    for memory_id, vector, kind in rows[250:]:
        kept.put(memory_of(memory_id, kind), {"id": memory_id, "kind": kind, "dense": vector})
    after = kept.search_dense(query, where, 300)
    assert after == index_of(300).search_dense(query, where, 300)
    assert len(after) == sum(1 for _, _, kind in rows if kind == "fact")


def test_a_filter_that_allows_every_row_scores_the_index_vectors_without_a_copy() -> None:
    # A session's own dense searches allow every row it holds: the vectors are scored where the index keeps them,
    # to the bit as the copy scored them, and no copy is held (it doubled a session's vectors: 32 sessions of 1,000
    # turns with 512-float vectors did not fit the read cache, and each turn loaded its session again).
    rng = np.random.default_rng(5)
    rows = [(f"mem_{n:04x}", rng.standard_normal(16).tolist()) for n in range(200)]
    index = LocalIndex(16)
    for memory_id, vector in rows:
        index.put(memory_of(memory_id, "fact"), {"id": memory_id, "kind": "fact", "dense": vector})
    query = rng.standard_normal(16).tolist()
    found = index.search_dense(query, Filter('kind == "fact"'), 200)
    matrix = np.asarray([unit_vector(vector, 16) for _, vector in rows], dtype=np.float32)  # as put keeps them
    copy = np.empty((len(rows) + 64, 16), dtype=np.float32)  # as gather_dense_rows copies the allowed rows
    copy[:len(rows)] = matrix[np.arange(len(rows))]
    scores = inner_products(copy[:len(rows)], unit_vector(query, 16))
    assert [(memory.id, score) for memory, score in found] == sorted(
        ((memory_id, float(scores[n])) for n, (memory_id, _) in enumerate(rows)), key=lambda hit: -hit[1])
    assert index._dense_rows is None
    index.put(memory_of("mem_0000", "todo"), {"id": "mem_0000", "kind": "todo", "dense": rows[0][1]})
    assert len(index.search_dense(query, Filter('kind == "fact"'), 500)) == 199  # one row left out: a copy
    assert index._dense_rows is not None
    index.put(memory_of("mem_0000", "fact"), {"id": "mem_0000", "kind": "fact", "dense": rows[0][1]})
    again = index.search_dense(query, Filter('kind == "fact"'), 200)  # every row again: the copy is let go
    assert index._dense_rows is None
    assert [(memory.id, score) for memory, score in again] == [(memory.id, score) for memory, score in found]


def test_the_default_read_cache_holds_32_sessions_of_1000_number_rich_turns_with_the_default_embedder() -> None:
    # bench.long_session's chat leaves 3,645 rows at turn 1,000 (two archived messages and about one fact a turn), of
    # 512 floats with the default embedder (use). Served in turn, 32 such chats must all stay held: at the old
    # default (256 MB) 19 fitted (11 while the vectors were held twice), and every turn of the others loaded its session again (issue 47).
    rng = np.random.default_rng(3)
    index = LocalIndex(512)
    for n in range(3645):
        text = f"第{n // 3}轮：我的订单号 {10000 + n} 怎么样了？上次说的金额是 {n % 990} 元"
        memory = Memory(id=f"mem_{n:05x}", kind="turn", content=text, scope="session", agent_id="kefu",
                        session_id="long", created_at=n, updated_at=n, version=1, importance=5.0)
        index.put(memory, {"id": memory.id, "dense": rng.standard_normal(512).tolist()}, tokenize=False)
    every = Filter('kind == "turn"')
    assert len(index.search_dense(rng.standard_normal(512).tolist(), every, BUILT_ROWS)) == BUILT_ROWS  # all built
    default = StoreSettings.model_fields["read_cache_mb"].default << 20  # not the environment's
    assert default == CACHED_BYTES and 32 * index.nbytes() <= default


def test_a_row_read_again_keeps_its_built_memory_over_rows_read_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # The Memory objects built for reads are kept least recently read first out: a row every turn finds (a standing
    # memory, the best hit) keeps its object, and with it what was worked out from it (common/row_memo.py), while
    # the rows one search found once go. First in, first out, it was built again every BUILT_ROWS builds (issue 47).
    monkeypatch.setattr(local_index, "BUILT_ROWS", 3)
    index = LocalIndex(4)
    for n in range(4):
        index.put(memory_of(f"mem_{n}", "fact"), {"id": f"mem_{n}", "kind": "fact",
                                                  "dense": [1.0 if d == n else 0.0 for d in range(4)]})
    every = Filter('kind == "fact"')

    def read(n: int) -> Memory:
        [(memory, _)] = index.search_dense([1.0 if d == n else 0.0 for d in range(4)], every, 1)
        assert memory.id == f"mem_{n}"
        return memory

    first = read(0)
    read(1), read(2)
    assert read(0) is first  # read again: now the most recent
    read(3)  # a fourth row: the least recently read (mem_1) goes, not the first built
    assert read(0) is first


def memory_of(memory_id: str, kind: str) -> Memory:
    return Memory(id=memory_id, kind=kind, content=memory_id, scope="session",  # type: ignore[arg-type]
                  agent_id="a", session_id="s", created_at=1, updated_at=1, version=1, importance=5.0)


def test_rows_added_after_a_dense_search_extend_its_copy_and_other_writes_rebuild_it() -> None:
    # A record_turn adds rows (archived messages, facts) after the ones a session's dense filter allowed: the copy
    # of their vectors is extended in place instead of copied again (the assemble after every turn copied the
    # whole session: 20 MB at 10k rows of 512 floats). A write to an allowed row (a supersede, a vector filled)
    # rebuilds it. Each state is scored to the bit against an index that never searched, built by the same puts.
    rng = np.random.default_rng(11)
    puts = [(f"mem_{n:04x}", rng.standard_normal(16).tolist(), "fact" if n % 3 else "todo") for n in range(120)]
    where, query = Filter('kind == "fact"'), rng.standard_normal(16).tolist()

    def replayed(done: list[tuple[str, list[float], str]]) -> LocalIndex:
        index = LocalIndex(16)
        for memory_id, vector, kind in done:
            index.put(memory_of(memory_id, kind), {"id": memory_id, "kind": kind, "dense": vector})
        return index

    kept = replayed(puts)
    done = list(puts)
    assert kept.search_dense(query, where, 500) == replayed(done).search_dense(query, where, 500)
    copy = kept._dense_rows
    assert copy is not None
    added = [(f"mem_{n:04x}", rng.standard_normal(16).tolist(), "fact") for n in range(120, 130)]
    for memory_id, vector, kind in added:
        kept.put(memory_of(memory_id, kind), {"id": memory_id, "kind": kind, "dense": vector})
    done += added
    assert kept.search_dense(query, where, 500) == replayed(done).search_dense(query, where, 500)
    assert kept._dense_rows is not None and kept._dense_rows.buffer is copy.buffer  # extended in place
    superseded = (puts[1][0], puts[1][1], "todo")  # an allowed row leaves the filter
    kept.put(memory_of(superseded[0], "todo"), {"id": superseded[0], "kind": "todo", "dense": superseded[1]})
    done.append(superseded)
    assert kept.search_dense(query, where, 500) == replayed(done).search_dense(query, where, 500)
    assert kept._dense_rows.buffer is not copy.buffer  # rebuilt
    many = [(f"mem_{n:04x}", rng.standard_normal(16).tolist(), "fact") for n in range(130, 600)]
    for memory_id, vector, kind in many:  # more than the copy has room for
        kept.put(memory_of(memory_id, kind), {"id": memory_id, "kind": kind, "dense": vector})
        if int(memory_id[4:], 16) % 97 == 0:
            kept.search_dense(query, where, 5)
    done += many
    assert kept.search_dense(query, where, 1000) == replayed(done).search_dense(query, where, 1000)
