"""A store that reads behind: the lease holder reads again until the store shows the version Redis says was committed.

A Milvus Lite server answers a primary-key read from one connection, now and then, with an older row than the one
another connection's acknowledged upsert wrote (acn/storage/repositories/catch_up.py). Here the store really is a
Lite server on loopback and Redis a real redis-server; "another replica's write not visible yet" is Redis saying a
version the store does not show, then (in one test) a writer without the lease landing it, as the late row does.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest
import redis as redis_client

from acn.app.statuses import http_status
from acn.common.conversation import SessionState
from acn.common.errors import StoreBehindError
from acn.common.models import Namespace
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.catch_up import CATCH_UP_SECONDS
from acn.storage.repositories.coordination import RedisCoordinator
from acn.storage.repositories.sessions import SessionRepository, _session_key
from tests.redis_support import RedisServer, redis_server

TENANT = "t1"
NS = Namespace(agent_id="a", session_id="s")


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


@pytest.fixture
def replica(lite_server: str, redis: RedisServer) -> Iterator[tuple[SessionRepository, MilvusStore, RedisCoordinator]]:
    """One replica's session repository (a server store, a Redis coordinator) on a fresh collection prefix."""
    store = MilvusStore(lite_server).open()
    coordinator = RedisCoordinator(redis.url, prefix="b" + uuid.uuid4().hex[:8], lease_ms=10_000, wait_seconds=5.0)
    sessions = SessionRepository(store, prefix="b" + uuid.uuid4().hex[:8], coordinator=coordinator)
    sessions.open()
    try:
        yield sessions, store, coordinator
    finally:
        coordinator.close()
        store.close()


def commit_turns(sessions: SessionRepository, count: int) -> int:
    for _ in range(count):
        with sessions.locked(TENANT, NS):
            state = sessions.head(TENANT, NS)
            saved = sessions.commit(TENANT, NS, state.model_copy(update={"turn": state.turn + 1}), reason="test")
    return saved.version


def redis_version(coordinator: RedisCoordinator, redis: RedisServer, value: int | None = None) -> int | None:
    """Read (or set, as another replica's commit does) the version Redis holds for the session."""
    client = redis_client.Redis.from_url(redis.url)
    try:
        key = coordinator._version_key(_session_key(TENANT, NS))
        if value is not None:
            client.set(key, value)
        raw = client.get(key)
        return int(raw) if raw is not None else None
    finally:
        client.close()


def test_each_commit_tells_redis_its_version(replica: tuple, redis: RedisServer) -> None:
    sessions, _, coordinator = replica
    assert commit_turns(sessions, 2) == 2
    assert redis_version(coordinator, redis) == 2


def test_a_holder_reads_again_until_the_store_shows_the_committed_version(replica: tuple, redis: RedisServer) -> None:
    sessions, store, coordinator = replica
    commit_turns(sessions, 2)
    redis_version(coordinator, redis, 3)  # another replica committed version 3; this store does not show it yet
    late = SessionRepository(store, prefix=sessions.spec.name.removesuffix("_sessions"))
    assert late.spec.name == sessions.spec.name

    def land() -> None:  # the write lands a moment later (a writer of its own, as the late row is)
        time.sleep(0.3)
        late.commit(TENANT, NS, SessionState(turn=3), reason="the other replica")

    writer = threading.Thread(target=land)
    started = time.monotonic()
    writer.start()
    try:
        with sessions.locked(TENANT, NS):
            state = sessions.head(TENANT, NS)  # without the catch-up: version 2, and the commit below overwrites 3
            saved = sessions.commit(TENANT, NS, state.model_copy(update={"turn": state.turn + 1}), reason="test")
    finally:
        writer.join()
    assert (state.version, state.turn, state.reason) == (3, 3, "the other replica")
    assert time.monotonic() - started >= 0.3
    assert saved.version == 4 and redis_version(coordinator, redis) == 4


def test_a_store_that_stays_behind_is_a_503_and_nothing_is_written(replica: tuple, redis: RedisServer) -> None:
    sessions, _, coordinator = replica
    commit_turns(sessions, 1)
    redis_version(coordinator, redis, 5)
    started = time.monotonic()
    with pytest.raises(StoreBehindError) as behind, sessions.locked(TENANT, NS):
        sessions.head(TENANT, NS)
    assert time.monotonic() - started >= CATCH_UP_SECONDS
    assert behind.value.code == "store_behind" and http_status(behind.value) == 503
    assert "version 1 of this session, and version 5 was committed" in str(behind.value)
    assert sessions.head_version(TENANT, NS) == 1  # nothing written


@pytest.mark.parametrize("whole_agent", [False, True])
def test_a_deleted_session_starts_again_at_version_one_without_waiting(replica: tuple, redis: RedisServer,
                                                                      whole_agent: bool) -> None:
    sessions, _, coordinator = replica
    commit_turns(sessions, 3)
    sessions.delete(TENANT, NS.agent_id, None if whole_agent else NS.session_id)
    assert redis_version(coordinator, redis) is None  # forgotten with the rows
    started = time.monotonic()
    assert commit_turns(sessions, 1) == 1
    assert time.monotonic() - started < CATCH_UP_SECONDS
    assert redis_version(coordinator, redis) == 1


def test_a_version_redis_could_not_forget_costs_one_wait_not_the_session(replica: tuple, redis: RedisServer) -> None:
    # Redis down during a delete: it still names a version the store no longer has any head for.
    sessions, _, coordinator = replica
    redis_version(coordinator, redis, 7)
    started = time.monotonic()
    assert commit_turns(sessions, 1) == 1  # no head for the whole wait: a new session, not a 503
    assert time.monotonic() - started >= CATCH_UP_SECONDS
    assert redis_version(coordinator, redis) == 1


def test_a_head_whose_rows_are_not_visible_yet_is_read_again_then_a_503(replica: tuple, redis: RedisServer) -> None:
    # The head of version 2 is visible, its snapshot rows are not (written apart here, as a read between them sees).
    sessions, store, coordinator = replica
    commit_turns(sessions, 1)
    store.upsert(sessions.spec.name, [sessions._head_row(TENANT, NS, SessionState(version=2, turn=2))])
    redis_version(coordinator, redis, 2)
    started = time.monotonic()
    with pytest.raises(StoreBehindError) as behind, sessions.locked(TENANT, NS):
        sessions.head(TENANT, NS)  # before: 404 not_found at once, for a version that exists
    assert time.monotonic() - started >= CATCH_UP_SECONDS
    assert "shows the head of version 2 of this session but not its rows yet" in str(behind.value)
