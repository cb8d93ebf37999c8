"""After a restart, recently active sessions are warmed in the background (acn/app/warmer.py, issue 33).

Store calls are counted as tests/test_new_session_cost.py counts them: a primary-key lookup reads the ids it
names, anything else every row of the collection.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from acn.app.runtime import Runtime
from acn.app.warmer import Warmer
from acn.assembly.warm import texts_budget
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.memory.items import MemoryItem
from acn.memory.write import write_items
from acn.retrieval.learned_ranker import _parsed_model
from acn.server import create_app
from acn.storage.database.memory_rows import new_memory_id
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from acn.text.byte_cache import TEXT_CACHE
from acn.text.terms import segmented
from tests.conftest import ENGINE, make_settings, post
from tests.test_new_session_cost import Counted, other_rows

needs_index = pytest.mark.skipif(bool(ENGINE), reason="the C++ engine's runs turn the in-process index off")


def rows_of(namespace: Namespace, count: int, start: int = 0, age_ms: int = 60_000) -> list[Memory]:
    now = int(time.time() * 1000) - age_ms
    return [Memory(id=new_memory_id(), kind="fact", content=f"{namespace.agent_id} 的订单ORD-{i:06d}退款{i % 97}元",
                   scope="session", agent_id=namespace.agent_id, session_id=namespace.session_id or "",
                   created_at=now + i, updated_at=now + i, version=1, importance=5.0)
            for i in range(start, start + count)]


def stored_then_restarted(tmp_path: Path, batches: list[list[Memory]], **overrides: Any) -> tuple[Flask, Runtime]:
    """Write the batches (one save each, in order: the last is the most recently active), close, open again."""
    settings = make_settings(tmp_path, **overrides)
    app = create_app(settings)
    for batch in batches:
        app.extensions["acn"].memories.save(DEFAULT_TENANT, batch)
    app.extensions["acn"].close()
    app = create_app(settings)
    runtime: Runtime = app.extensions["acn"]
    if runtime.memories.warming is not None:  # the store's first search: /readyz waits for it, start-up does not
        runtime.memories.warming.join(60)
    return app, runtime


def warmed(runtime: Runtime) -> Warmer:
    """Return the runtime's warmer once its pass is done."""
    assert runtime.warmer is not None and runtime.warmer.done.wait(60)
    return runtime.warmer


@needs_index
def test_a_warmed_sessions_first_memory_write_after_a_restart_reads_no_memory_row(tmp_path: Path) -> None:
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    app, runtime = stored_then_restarted(tmp_path, [other_rows(200), rows_of(mine, 40)])
    try:
        assert warmed(runtime).progress()["warmed"] >= 1
        counted = Counted(runtime.store)
        response = post(app.test_client(), "memory_write", {
            **mine.model_dump(exclude_none=True), "items": [{"content": "old-agent 的订单ORD-000003退款3元"},
                                                            {"content": "客户的会员等级是金卡"}]})
        assert response.status_code == 200, response.get_json()
        assert [r["action"] for r in response.get_json()["results"]] == ["duplicate", "added"]
        memories = runtime.memories.spec.name
        # The pool and the index were built before the call: it read no memory row (it wrote one) and scanned
        # nothing (a head or two by primary key at most).
        assert [call for call in counted.calls if call[1] == memories and call[0] not in ("upsert", "insert")] == []
        assert [call for call in counted.calls if call[3]] == []
    finally:
        runtime.close()


@needs_index
def test_a_row_written_after_warming_is_seen_by_the_next_write(tmp_path: Path) -> None:
    # The warmed pool is parked under the agent's write counters: a save that did not go through it (an import, a
    # record_turn's memories) makes it stale, and the next batch reads the session again.
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 20)])
    try:
        warmed(runtime)
        later = rows_of(mine, 1, start=500)[0].model_copy(update={"content": "客户把收货地址改成了张江路100号"})
        runtime.memories.save(DEFAULT_TENANT, [later])
        response = post(app.test_client(), "memory_write", {**mine.model_dump(exclude_none=True),
                                                            "items": [{"content": "客户把收货地址改成了张江路100号"}]})
        assert response.status_code == 200, response.get_json()
        assert [(r["action"], r["id"]) for r in response.get_json()["results"]] == [("duplicate", later.id)]
    finally:
        runtime.close()


def test_readyz_answers_503_while_sessions_are_warmed_and_200_once_done(tmp_path: Path) -> None:
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 5)], warm_mb=0)
    try:
        client = app.test_client()
        assert client.get("/readyz").status_code == 200  # warming off: nothing to wait for
        warmer = Warmer(runtime.memories, budget_bytes=16 << 20)
        runtime.warmer = warmer
        # The namespace's lock (held here as a batch would hold it) keeps the warmer at the session's pool.
        with runtime.memories.namespace_lock(DEFAULT_TENANT, mine):
            warmer.start(existed=True)
            ready = client.get("/readyz")
            assert (ready.status_code, ready.get_json()["pending"]) == (503, ["warming"])
            assert client.get("/healthz").status_code == 200  # liveness is not readiness
        assert warmer.done.wait(60)
        ready = client.get("/readyz")
        progress = ready.get_json()["warming"]
        # The C++ engine's runs hold no in-process index: the session is left cold there.
        assert (ready.status_code, ready.get_json()["pending"], progress["warmed"], progress["cold"]) == \
            (200, [], *((0, 1) if ENGINE else (1, 0)))
    finally:
        runtime.close()


@needs_index
def test_a_session_beyond_what_the_caches_hold_is_left_cold_and_still_answers(tmp_path: Path) -> None:
    # Two sessions of 30 rows, an in-process index of 40 rows in all: the most recent is warmed, the other is left
    # cold (warming it would push the first out again) and its first write reads the store, as before warming.
    recent, older = Namespace(agent_id="recent", session_id="chat"), Namespace(agent_id="older", session_id="chat")
    app, runtime = stored_then_restarted(tmp_path, [rows_of(older, 30, age_ms=120_000), rows_of(recent, 30)],
                                           local_index_rows=40)
    try:
        progress = warmed(runtime).progress()
        assert (progress["sessions"], progress["warmed"], progress["cold"]) == (2, 1, 1)
        assert runtime.memories.cache is not None and set(runtime.memories.cache.indexes) == {(DEFAULT_TENANT, "recent", "chat")}
        response = post(app.test_client(), "memory_write", {**older.model_dump(exclude_none=True),
                                                            "items": [{"content": "older 的订单ORD-000007退款7元"}]})
        assert [r["action"] for r in response.get_json()["results"]] == ["duplicate"]
    finally:
        runtime.close()


def test_a_row_another_replica_writes_after_warming_is_seen(lite_server: str) -> None:
    # Against a server other processes write too: the warmed pool is brought up to date from the store by the
    # next batch (rows stamped since its watermark), never trusted as it was warmed.
    first, second = (MilvusStore(lite_server).open() for _ in range(2))
    try:
        prefix = "w" + new_memory_id()[4:12]
        ns = Namespace(agent_id="shared-agent", session_id="chat")
        writer = MemoryRepository(second, prefix=prefix, embedder=None)
        writer.open()
        writer.save(DEFAULT_TENANT, rows_of(ns, 10))
        warmed = MemoryRepository(first, prefix=prefix, embedder=None)
        warmed.open()
        warmer = Warmer(warmed, budget_bytes=16 << 20)
        warmer.run()
        assert warmer.progress()["warmed"] == 1
        later = rows_of(ns, 1, start=500, age_ms=0)[0].model_copy(update={"content": "客户把收货地址改成了张江路100号"})
        writer.save(DEFAULT_TENANT, [later])
        results = write_items(warmed, DEFAULT_TENANT, ns, [MemoryItem(content="客户把收货地址改成了张江路100号")],
                              threshold=0.9)
        assert [(r.action, r.id) for r in results] == [("duplicate", later.id)]
    finally:
        first.close()
        second.close()


@needs_index
def test_a_warmed_sessions_first_assemble_and_record_turn_test_no_filter_the_warmer_did_not(tmp_path: Path) -> None:
    # A session index tests a filter over every row once, then keeps the answer (a 5k-row namespace's first
    # assemble spent ~90 % of its time there): the warmer makes assemble's own reads, so its first call adds none.
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 40)])
    try:
        warmed(runtime)
        assert runtime.memories.cache is not None
        index = runtime.memories.cache.indexes[(DEFAULT_TENANT, mine.agent_id, mine.session_id or "")]
        tested = set(index._masks)
        for mode in ("focused", "snapshot"):
            response = post(app.test_client(), "assemble", {**mine.model_dump(exclude_none=True), "mode": mode,
                                                            "user_input": "订单ORD-000003退款多少"})
            assert response.status_code == 200, response.get_json()
        response = post(app.test_client(), "record_turn", {**mine.model_dump(exclude_none=True), "messages": [
            {"role": "user", "content": "订单ORD-000003退款多少"}, {"role": "assistant", "content": "退款3元"}]})
        assert response.status_code == 200, response.get_json()
        assert set(index._masks) == tested
    finally:
        runtime.close()


@needs_index
def test_a_warmed_sessions_first_assemble_parses_no_ranker_model(tmp_path: Path) -> None:
    # The re-ranker's forests take ~30 ms to parse. The warmer parsed them, but under another cache entry than the
    # one assemble asks for (`load_model()` and `load_model(MODEL_FILE)`): a warmed namespace of 100k spent 34 ms
    # of its 67 ms first assemble parsing them again.
    _parsed_model.cache_clear()  # forget earlier tests' parse: the warmer's must be this process's only one
    mine = Namespace(agent_id="old-agent", session_id="old-chat")
    app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 40)])
    try:
        warmed(runtime)
        assert _parsed_model.cache_info().misses == 1
        response = post(app.test_client(), "assemble", {**mine.model_dump(exclude_none=True), "mode": "focused",
                                                        "user_input": "订单ORD-000003退款多少"})
        assert response.status_code == 200, response.get_json()
        assert _parsed_model.cache_info().misses == 1 and _parsed_model.cache_info().hits >= 1
    finally:
        runtime.close()


@needs_index
def test_the_warmer_segments_the_most_recent_sessions_texts_within_its_share_of_the_text_cache(tmp_path: Path) -> None:
    # The re-ranker's content terms (jieba's HMM, ~1-2 ms a Chinese text) were the first assemble's main cost after
    # a restart. A 1 MB text cache allows the pass 512 KB (~1.5 KB a text here): all of the most recent session's
    # texts, and at most a part of the older one's.
    recent, older = Namespace(agent_id="seg-recent", session_id="chat"), Namespace(agent_id="seg-older", session_id="chat")
    newer_rows, older_rows = rows_of(recent, 250), rows_of(older, 250, age_ms=120_000)
    TEXT_CACHE.clear()
    app, runtime = stored_then_restarted(tmp_path, [older_rows, newer_rows], text_cache_mb=1)
    try:
        warmer = warmed(runtime)
        assert warmer.progress()["warmed"] == 2
        assert 0 < warmer.texts_used <= texts_budget() + 4096
        assert [row.content for row in newer_rows if segmented(row.content)] == []  # each was kept: nothing to add
        kept_older = [row.content for row in older_rows if not segmented(row.content)]
        assert len(kept_older) < len(older_rows) // 2
    finally:
        runtime.close()
        TEXT_CACHE.resize(32 << 20)


@needs_index
def test_a_warmed_sessions_first_focused_assemble_counts_no_standing_memorys_tokens(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A focused assemble counts the tokens of every standing memory to fit them in its share (within_share): after a
    # restart a namespace of 10k memories' first assemble made ~200 tiktoken encodes of them, a third of its time.
    # The warmer counts them (the tokenizer keeps counts by text), so the first call encodes none of them.
    mine = Namespace(agent_id="standing-agent", session_id="standing-chat")
    marker = uuid.uuid4().hex[:8]  # texts no earlier test counted (the tokenizer is shared by the process)
    kinds = ("identity", "constraint", "decision")
    rows = [row.model_copy(update={"kind": kinds[i % 3], "content": f"{row.content} 规则{marker}-{i}"})
            for i, row in enumerate(rows_of(mine, 30))]
    app, runtime = stored_then_restarted(tmp_path, [rows])
    try:
        warmed(runtime)
        encoding, encoded = runtime.tokenizer.encoding, []

        class Recording:
            def encode(self, text: str, **options: Any) -> list[int]:
                encoded.append(text)
                return encoding.encode(text, **options)

        monkeypatch.setattr(runtime.tokenizer, "_encoding", Recording())
        response = post(app.test_client(), "assemble", {**mine.model_dump(exclude_none=True), "mode": "focused",
                                                        "user_input": "订单ORD-000003退款多少"})
        assert response.status_code == 200, response.get_json()
        assert encoded  # the call's own new texts (its input, its lines) are counted
        assert not {row.content for row in rows} & set(encoded)
    finally:
        runtime.close()
