"""The Redis session lease: one holder at a time, fencing tokens that only grow, a stalled holder refused."""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator

import pytest

from acn.app.statuses import http_status
from acn.common.errors import CoordinationUnavailableError, LeaseLostError, SessionBusyError
from acn.common.settings import Settings
from acn.storage.repositories.coordination import RedisCoordinator, open_coordinator
from tests.redis_support import RedisServer, redis_server


@pytest.fixture(scope="module")
def redis() -> Iterator[RedisServer]:
    with redis_server() as server:
        yield server


_opened: list[RedisCoordinator] = []


@pytest.fixture(autouse=True)
def _close_coordinators() -> Iterator[None]:
    yield
    while _opened:
        _opened.pop().close()  # stops its renewer thread and closes its connections


def coordinator(url: str, store: str = "", **kwargs: float) -> RedisCoordinator:
    opened = RedisCoordinator(url, prefix="test", store=store, **{"lease_ms": 5000, "wait_seconds": 5.0, **kwargs})
    _opened.append(opened)
    return opened


def test_one_holder_at_a_time_and_tokens_grow(redis: RedisServer) -> None:
    first, second = coordinator(redis.url), coordinator(redis.url)
    inside: list[str] = []
    tokens: list[int] = []

    def work(owner: RedisCoordinator, name: str) -> None:
        for _ in range(20):
            with owner.hold("s-serial") as lease:
                inside.append(name)
                assert len(inside) == 1  # nobody else in the critical section
                tokens.append(lease.token)
                owner.check(lease)
                inside.pop()

    threads = [threading.Thread(target=work, args=(owner, str(i))) for i, owner in enumerate((first, second))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(tokens) == 40 and tokens == sorted(tokens) and len(set(tokens)) == 40


def test_a_holder_past_its_lease_is_refused_at_commit(redis: RedisServer) -> None:
    slow, fast = coordinator(redis.url, lease_ms=300), coordinator(redis.url)
    with slow.hold("s-stall") as stale:
        slow._stop.set()  # the renewer of a stopped process does not run (SIGSTOP)
        time.sleep(0.6)
        with fast.hold("s-stall") as fresh:
            assert fresh.token > stale.token
            fast.check(fresh)
        with pytest.raises(LeaseLostError) as refused:
            slow.check(stale)
        assert refused.value.code == "lease_lost" and http_status(refused.value) == 409


def test_a_lease_that_lapsed_while_nobody_took_the_session_is_taken_back(redis: RedisServer) -> None:
    # A stall (a GC pause, a process starved of CPU) past the lease with nobody waiting: the fencing counter is
    # still this holder's token, so nobody else can have written, and the commit goes through.
    import redis as redis_client

    slow, other = coordinator(redis.url, lease_ms=300), coordinator(redis.url, wait_seconds=0.2)
    store = redis_client.Redis.from_url(redis.url)
    slow._stop.set()  # no renewal ever, as in a stopped process (set before the renewer starts: no race)
    try:
        with slow.hold("s-lapsed") as lease:
            time.sleep(0.6)
            assert store.exists("test:lease:s-lapsed") == 0  # it really expired
            slow.check(lease)  # taken back: no LeaseLostError
            assert store.pttl("test:lease:s-lapsed") > 0
            with pytest.raises(SessionBusyError):  # and held again: nobody else gets in before it is given back
                with other.hold("s-lapsed"):
                    pass
        with other.hold("s-lapsed") as after:
            assert after.token == lease.token + 1
    finally:
        store.close()


def test_a_refused_commit_says_how_long_it_held_and_when_it_was_last_renewed(redis: RedisServer) -> None:
    slow, fast = coordinator(redis.url, lease_ms=300), coordinator(redis.url)
    slow._stop.set()  # never renewed: the lease is as old as the hold
    with slow.hold("s-told") as stale:
        time.sleep(0.6)
        with fast.hold("s-told"):
            pass
        with pytest.raises(LeaseLostError) as refused:
            slow.check(stale)
    told = re.search(r"held ([0-9.]+) s, last renewed ([0-9.]+) s ago, lease 300 ms", str(refused.value))
    assert told is not None and float(told[1]) >= 0.6 and float(told[2]) >= 0.6, str(refused.value)


def test_committed_versions_belong_to_one_store(redis: RedisServer) -> None:
    # Two deployments share a Redis and a collection prefix over two Milvus instances: a version one commits is
    # nothing the other's next lease may wait for; replicas of one store see it.
    here, replica = coordinator(redis.url, store="milvus-a:19530"), coordinator(redis.url, store="milvus-a:19530")
    elsewhere = coordinator(redis.url, store="milvus-b:19530")
    with here.hold("s-stores") as lease:
        here.note_committed(lease, 5)
    with replica.hold("s-stores") as seen:
        assert seen.committed == 5
    with elsewhere.hold("s-stores") as other:
        assert other.committed is None


def test_the_lease_is_renewed_while_held(redis: RedisServer) -> None:
    owner, other = coordinator(redis.url, lease_ms=300), coordinator(redis.url, wait_seconds=0.2)
    with owner.hold("s-renew") as lease:
        time.sleep(1.0)  # three leases long: the renewer kept it
        with pytest.raises(SessionBusyError):
            with other.hold("s-renew"):
                pass
        owner.check(lease)


def test_reentrant_within_a_thread(redis: RedisServer) -> None:
    owner = coordinator(redis.url, wait_seconds=0.2)
    with owner.hold("s-nest") as outer, owner.hold("s-nest") as inner:
        assert outer is inner
    with owner.hold("s-nest"):  # released once the outer block ended
        pass


def test_redis_down_is_503_and_recovers_without_a_new_client(tmp_path_factory: pytest.TempPathFactory) -> None:
    server = RedisServer(tmp_path_factory.mktemp("redis")).start()
    try:
        owner = coordinator(server.url)
        with owner.hold("s-down"):
            pass
        server.stop()
        with pytest.raises(CoordinationUnavailableError) as down:
            with owner.hold("s-down"):
                pass
        assert http_status(down.value) == 503 and down.value.code == "coordination_unavailable"
        server.start()  # same port, empty: the fencing counter restarts from Redis's clock
        with owner.hold("s-down") as lease:
            owner.check(lease)
    finally:
        server.stop()


def test_without_redis_a_server_uri_start_says_it_must_be_the_only_writer(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="acn.coordination"):
        assert open_coordinator(Settings(milvus_uri="http://127.0.0.1:19530")) is None
    assert any("must be the only one writing" in record.getMessage() for record in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="acn.coordination"):
        assert open_coordinator(Settings(milvus_uri="./data/memory.db")) is None  # Lite: one process per file
    assert caplog.records == []


def test_with_redis_the_settings_reach_the_coordinator(redis: RedisServer) -> None:
    opened = open_coordinator(Settings(milvus_uri="http://127.0.0.1:19530", redis_url=redis.url,
                                       redis_lease_ms=1234, redis_lock_wait_seconds=2.5))
    assert opened is not None and (opened.lease_ms, opened.wait_seconds) == (1234, 2.5) and opened.ping()
    opened.close()


def test_the_store_tag_in_redis_keys_carries_no_credentials(redis: RedisServer) -> None:
    # The tag comes from the server's own ACN_MILVUS_URI (no request names it); its user and password never reach
    # Redis, and replicas given the same server with other credentials still share the versions.
    with_secret = open_coordinator(Settings(milvus_uri="http://root:s3cret-pw@milvus.internal:19530",
                                            redis_url=redis.url))
    without = open_coordinator(Settings(milvus_uri="http://milvus.internal:19530", redis_url=redis.url))
    assert with_secret is not None and without is not None
    try:
        key = with_secret._version_key("s1")
        assert "s3cret" not in key and "root" not in key and key == without._version_key("s1")
    finally:
        with_secret.close()
        without.close()
