"""The load-once protocol (acn/storage/database/lite/load_once.py) on its own: queue, failure, race, overflow, concurrency."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from acn.storage.database.lite.load_once import LoadOnce


class Cache:
    """A minimal cache over LoadOnce: an epoch, the installed entries, and writes that reach loads in progress."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.epoch = 0
        self.installed: dict[str, list[str]] = {}
        self.loads: LoadOnce[str, list[str]] = LoadOnce(self.lock, lambda: self.epoch, list)

    def write(self, key: str, value: str) -> None:
        with self.lock:
            if key in self.installed:
                self.installed[key].append(value)
            queue = self.loads.queues().get(key)
            if queue is not None:
                queue.append(value)

    def install(self, key: str, rows: list[str], queued: list[str]) -> list[str]:
        self.installed[key] = rows + queued
        return self.installed[key]

    def load(self, key: str, query: Callable[[], list[str]], limit: int = 10) -> list[str] | None:
        return self.loads.load(key, query, overflows=lambda rows: len(rows) >= limit,
                               install=lambda rows, queued: self.install(key, rows, queued),
                               installed=lambda: self.installed.get(key))


def test_a_write_during_the_query_is_replayed_onto_what_is_installed() -> None:
    cache = Cache()

    def query() -> list[str]:
        cache.write("k", "late")  # lands after the rows were read
        return ["early"]

    assert cache.load("k", query) == ["early", "late"]
    assert cache.installed["k"] == ["early", "late"] and cache.loads.queues() == {}


def test_a_failed_query_unmarks_the_key_and_installs_nothing() -> None:
    cache = Cache()

    def failing() -> list[str]:
        raise ConnectionError("store down")

    with pytest.raises(ConnectionError):
        cache.load("k", failing)
    assert cache.loads.queues() == {} and "k" not in cache.installed
    assert cache.load("k", lambda: ["row"]) == ["row"]  # the next call loads again


def test_a_load_raced_by_an_invalidation_is_dropped() -> None:
    cache = Cache()

    def raced() -> list[str]:
        with cache.lock:
            cache.epoch += 1  # a delete landed while the rows were read: they may hold what it deleted
        return ["stale"]

    assert cache.load("k", raced) is None
    assert "k" not in cache.installed and not cache.loads.busy("k")
    assert cache.load("k", lambda: ["fresh"]) == ["fresh"]


def test_an_overflowing_key_is_not_loaded_again_until_cleared() -> None:
    cache = Cache()
    calls = 0

    def large() -> list[str]:
        nonlocal calls
        calls += 1
        return [str(n) for n in range(10)]

    assert cache.load("k", large) is None
    assert cache.load("k", large) is None and calls == 1  # remembered: the query is not repeated
    with cache.lock:
        assert cache.loads.busy("k")
        cache.loads.clear_overflow()
    assert cache.load("k", lambda: ["small"]) == ["small"]


def test_a_second_caller_does_not_load_while_the_first_does() -> None:
    cache = Cache()
    reading, release = threading.Event(), threading.Event()
    results: list[list[str] | None] = []

    def slow() -> list[str]:
        reading.set()
        assert release.wait(10)
        return ["row"]

    first = threading.Thread(target=lambda: results.append(cache.load("k", slow)))
    first.start()
    assert reading.wait(10)
    assert cache.load("k", lambda: pytest.fail("a second load ran")) is None  # told to ask the store instead
    release.set()
    first.join(10)
    assert results == [["row"]]
    assert cache.load("k", lambda: pytest.fail("loaded twice")) == ["row"]  # installed: returned as is
