"""A call that arrives before /readyz says ready (issue 47): what it waits for after a restart.

Measured on bench.scale --quick (a namespace of 10k memories in a store of 110k, the namespace's memory_retrieve sent
as soon as /healthz answered): 4.0-4.5 s, of which ~1 s loading the namespace's rows by id and ~0.7 s segmenting
their texts; the rest was the same texts segmented a second time by the background tokenizer and the start-up
warmer's work on other sessions beside it.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from acn.app.mcp_route import McpEndpoint
from acn.app.warmer import Warmer
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.server import create_app
from acn.storage.database import READS
from acn.storage.database.base import Filter
from acn.storage.database.lite import local_index
from acn.storage.database.lite.index_loads import IndexLoads
from acn.storage.database.lite.local_index import LocalIndex
from acn.storage.database.milvus_setup import lite_stored_rows
from tests.conftest import make_settings
from tests.test_start_warming import needs_index, rows_of, stored_then_restarted, warmed


def test_two_threads_tokenizing_an_index_segment_each_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A restart's first search tokenizes the rows of the index it loaded (search_text), and the background tokenizer
    # the same rows beside it: each segmented all of them. One pass is enough; the other waits for it.
    index = LocalIndex(0)
    for i in range(40):
        memory = Memory(id=f"m{i}", kind="fact", content=f"订单{i}的退款", scope="session", agent_id="a",
                        session_id="s", created_at=i, updated_at=i, version=1, importance=1.0)
        index.put(memory, {"id": memory.id, "content": memory.content, "kind": "fact"}, tokenize=False)
    segmented: list[str] = []
    tokens = local_index.bm25_tokens

    def slow_tokens(text: str) -> Any:
        segmented.append(text)
        time.sleep(0.002)  # jieba's time: the other thread starts while this one is under way
        return tokens(text)

    monkeypatch.setattr(local_index, "bm25_tokens", slow_tokens)
    start = threading.Barrier(2)

    def tokenize() -> None:
        start.wait()
        index.index_pending()

    threads = [threading.Thread(target=tokenize) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(segmented) == 40 and index.pending() == 0
    monkeypatch.setattr(local_index, "bm25_tokens", tokens)
    assert [memory.id for memory, _ in index.search_text("订单7的退款", Filter(""), 1)] == ["m7"]


def recorded_loads(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """Return the list every start-up index load (IndexLoads.prewarm) appends its session key to."""
    loads: list[tuple[str, str, str]] = []
    prewarm = IndexLoads.prewarm

    def recorded(self: IndexLoads, key: tuple[str, str, str]) -> LocalIndex | None:
        loads.append(key)
        return prewarm(self, key)

    monkeypatch.setattr(IndexLoads, "prewarm", recorded)
    return loads


@needs_index
def test_the_warmer_loads_the_most_recently_active_sessions_index_first(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # The session most likely to be asked for first, maybe before ready: the pass reached it last (least recently
    # active first, for the cache's order), and a request sent before ready loaded its 10k rows itself beside it.
    older, newer = Namespace(agent_id="warm-older", session_id="chat"), Namespace(agent_id="warm-newer", session_id="chat")
    loads = recorded_loads(monkeypatch)
    app, runtime = stored_then_restarted(tmp_path, [rows_of(older, 30, age_ms=120_000), rows_of(newer, 30)])
    try:
        warmer = warmed(runtime)
        newest, oldest = ((DEFAULT_TENANT, n.agent_id, n.session_id or "") for n in (newer, older))
        # Then each session in the plan's order, least recently active first: the first one's index is touched
        # again there, so the cache pushes out the least recently active session's first, as before.
        assert loads == [newest, oldest, newest]
        assert warmer.progress()["warmed"] == 2 and warmer.cold == 0
    finally:
        runtime.close()


@needs_index
def test_the_warmer_takes_no_next_session_while_a_request_is_being_handled(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # A request sent before ready (one process, no load balancer) had the pass's loads, pools and segmenting of
    # other sessions beside it: each step now waits for the requests being handled (READS.give_way).
    first, second = Namespace(agent_id="way-older", session_id="chat"), Namespace(agent_id="way-newer", session_id="chat")
    settings = make_settings(tmp_path)
    app = create_app(settings)
    app.extensions["acn"].memories.save(DEFAULT_TENANT, rows_of(first, 30, age_ms=120_000))
    app.extensions["acn"].memories.save(DEFAULT_TENANT, rows_of(second, 30))
    app.extensions["acn"].close()
    monkeypatch.setattr(READS, "_patience", 60.0)  # a slow machine's pauses must not end the wait in this test
    with READS.foreground():  # a request in flight while the store opens and the pass starts
        app = create_app(settings)
        warmer: Warmer | None = app.extensions["acn"].warmer
        assert warmer is not None and warmer.first_loaded.wait(30)
        time.sleep(0.5)
        assert warmer.warmed == 0 and not warmer.done.is_set()
    try:
        assert warmer.done.wait(60) and warmer.warmed == 2
    finally:
        app.extensions["acn"].close()


def test_the_mcp_sdk_is_imported_only_after_the_warmers_first_index(fresh_app: Flask) -> None:
    # ~0.6 s of imports under the interpreter lock, beside the first index a request before ready waits for.
    endpoint: McpEndpoint = fresh_app.extensions["acn_mcp"]
    first_loaded = threading.Event()
    endpoint.prepare_in_background(after=first_loaded)
    time.sleep(0.3)
    assert endpoint._toolbox is None and endpoint.pending() == ["mcp_tools"]
    first_loaded.set()
    assert endpoint._preparing is not None
    endpoint._preparing.join(60)
    assert endpoint._toolbox is not None and endpoint.pending() == []


@needs_index
def test_a_most_recent_session_the_plan_leaves_cold_is_not_loaded_first(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # first_index loads what the plan would warm, no more: 700 rows with their dedup pool and texts (~1.1 MB by the
    # warmer's estimate) are over a 1 MB budget, though the index alone (~0.5 MB) is not.
    mine = Namespace(agent_id="too-big", session_id="chat")
    loads = recorded_loads(monkeypatch)
    app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 700)], warm_mb=1)
    try:
        warmer = warmed(runtime)
        assert loads == [] and warmer.cold == 1 and warmer.held_bytes == 0
    finally:
        runtime.close()


def held_up_load(monkeypatch: pytest.MonkeyPatch, key: tuple[str, str, str]) -> tuple[threading.Event, threading.Event]:
    """Hold every load of this session's index (the start-up warmer's) until `release` is set; `loading` is set as
    one starts."""
    loading, release = threading.Event(), threading.Event()
    read_group = IndexLoads._read_group

    def held(self: IndexLoads, group: tuple[str, str, str]) -> LocalIndex | None:
        if group == key:
            loading.set()
            assert release.wait(60)
        return read_group(self, group)

    monkeypatch.setattr(IndexLoads, "_read_group", held)
    return loading, release


@needs_index
@pytest.mark.parametrize("small_store", [True, False], ids=["store answers", "load waited for"])
def test_a_search_before_ready_waits_for_the_warmers_load_only_when_the_store_would_answer_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, small_store: bool) -> None:
    # bench.peer's 10k namespace, restarted and asked as soon as /healthz answered: 2.8 s waiting for the warmer's
    # load of the namespace, 0.36 s answered by the store (HeldIndexes.store_sooner). In a store of many sessions
    # Lite's first search reads them all, and the load of the one asked for is sooner.
    # Ids shaped like a path's parts: the store rule must read the server's own file whatever the request names.
    mine = Namespace(agent_id="etc..passwd", session_id="collections:..:manifest.json")
    key = (DEFAULT_TENANT, mine.agent_id, mine.session_id or "")
    if not small_store:  # no store is small enough: a store larger than the load
        monkeypatch.setattr("acn.storage.database.lite.held.STORE_ROWS_PER_LOADED_ROW", 0)
    loading, release = held_up_load(monkeypatch, key)
    read: list[tuple[str, str]] = []  # what the rule reads: the server's own Lite file, whatever a request names

    def stored_rows(path: str, collection: str) -> int | None:
        read.append((path, collection))
        return lite_stored_rows(path, collection)

    monkeypatch.setattr("acn.storage.repositories.memories.lite_stored_rows", stored_rows)
    app, runtime = stored_then_restarted(tmp_path, [rows_of(mine, 60)])
    answers: list[Any] = []
    try:
        assert loading.wait(30)  # the warmer is loading the session, held up there
        asked = threading.Thread(target=lambda: answers.append(app.test_client().post(
            "/v1/nodes/memory_retrieve", json={**mine.model_dump(exclude_none=True), "query": "订单ORD-000042退款多少",
                                               "top_k": 3}).get_json()))
        asked.start()
        asked.join(5 if small_store else 1)
        assert asked.is_alive() is not small_store  # answered at once by the store, or waiting for the load
        release.set()
        asked.join(30)
        assert not asked.is_alive() and answers[0]["ok"]
        assert "ORD-000042" in answers[0]["text"]
        assert read and set(read) == {(str(tmp_path / "memory.db"), runtime.memories.spec.name)}
    finally:
        release.set()
        warmed(runtime)
        runtime.close()


def test_a_stores_row_count_comes_from_its_manifest_and_a_strange_one_counts_as_unknown(tmp_path: Path) -> None:
    # Unknown: the search waits for its session's load, as it always did.
    folder = tmp_path / "collections" / "memories"
    assert lite_stored_rows(str(tmp_path), "memories") is None  # not laid out as Lite 3 lays it out
    folder.mkdir(parents=True)
    for text, rows in [('{"current_seq": 42}', 42), ('{"current_seq": -1}', None), ('{"current_seq": true}', None),
                       ('{"current_seq": "42"}', None), ("[42]", None), ("not json", None), ("{}", None),
                       ("[" * 100_000 + "]" * 100_000, None), ('{"current_seq": 42, "x": "' + "y" * (4 << 20) + '"}', None),
                       (b"\xff\xfe".decode("latin-1"), None)]:
        (folder / "manifest.json").write_text(text, encoding="utf-8")
        assert lite_stored_rows(str(tmp_path), "memories") == rows, text
