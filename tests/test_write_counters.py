"""A kept dedup pool (and a remembered view) goes stale only when a memory its namespace reads is written (issue 47).

Counted per agent before: with 32 chats of one agent at once, every turn's extracted facts in one session made
every other session's parked pool stale, and each record_turn rebuilt its pool from its session's rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

import acn.memory.pool
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Namespace
from acn.storage.database.lite.read_cache import ReadCache
from acn.storage.repositories import scope_key
from tests.conftest import ENGINE, post

needs_cache = pytest.mark.skipif(bool(ENGINE), reason="the C++ engine's runs keep no read cache")


@pytest.fixture()
def agent() -> str:
    return f"kefu-{uuid.uuid4().hex[:8]}"


@pytest.fixture()
def pools_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Namespace | None]]:
    """Record the namespace of every dedup pool built from the store's rows (a parked one is taken back instead)."""
    built: list[Namespace | None] = []
    original = acn.memory.pool.Pool.__init__

    def counting(self: acn.memory.pool.Pool, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self.namespace)

    monkeypatch.setattr(acn.memory.pool.Pool, "__init__", counting)
    yield built


def cache_of(app: Flask) -> ReadCache:
    cache = app.extensions["acn"].memories.cache
    assert cache is not None
    return cache


def write(client: FlaskClient, ns: dict[str, str], *items: str | tuple[str, str]) -> list[str]:
    """Write one batch (content, or (content, scope)); return each item's action."""
    batch = [{"kind": "fact", "content": item, "scope": "session"} if isinstance(item, str) else
             {"kind": "fact", "content": item[0], "scope": item[1]} for item in items]
    response = post(client, "memory_write", {**ns, "items": batch})
    assert response.status_code == 200, response.get_data(as_text=True)
    return [str(result["action"]) for result in response.get_json()["results"]]


def pool_key(ns: dict[str, str], scopes: list[str]) -> tuple[Any, ...]:
    """The key a batch of these scopes parks its pool under (acn/memory/pool.py)."""
    namespace = Namespace(**ns)
    return ("dedup pool", DEFAULT_TENANT, namespace.agent_id, scope_key(namespace, scopes))


def current(app: Flask, ns: dict[str, str], scopes: list[str]) -> bool:
    """Return True when the namespace's pool of these scopes is parked and still current."""
    return cache_of(app).parked_current(DEFAULT_TENANT, Namespace(**ns), pool_key(ns, scopes), scopes)


@needs_cache
def test_another_sessions_writes_leave_a_sessions_pool_current(app: Flask, client: FlaskClient, agent: str,
                                                               pools_built: list[Namespace | None]) -> None:
    one, other = {"agent_id": agent, "session_id": "c-1"}, {"agent_id": agent, "session_id": "c-2"}
    write(client, one, "订单 10001 的金额是 300 元")
    write(client, other, "订单 20002 的金额是 500 元")
    assert current(app, one, ["session"])
    built = len(pools_built)
    for turn in range(3):  # the two sessions take turns, as concurrent chats do
        write(client, one, f"订单 1{turn}111 的金额是 3{turn} 元")
        write(client, other, f"订单 2{turn}222 的金额是 5{turn} 元")
    assert len(pools_built) == built  # each took its parked pool back every time


@needs_cache
def test_a_write_its_namespace_reads_makes_a_pool_stale_and_dedup_sees_it(app: Flask, client: FlaskClient,
                                                                        agent: str) -> None:
    one, other = {"agent_id": agent, "session_id": "c-1"}, {"agent_id": agent, "session_id": "c-2"}
    both = ["agent", "session"]
    write(client, one, "订单 10001 的金额是 300 元", ("客服工作时间是早 9 点到晚 6 点", "agent"))
    assert current(app, one, both)
    write(client, other, "订单 20002 的金额是 500 元")  # the other session's own scope: not read by `one`
    assert current(app, one, both)
    # Another session writes to the agent's own scope, which both sessions read.
    assert write(client, other, ("公司的退货地址是上海市浦东新区 88 号", "agent")) == ["added"]
    assert not current(app, one, both)
    assert write(client, one, "订单 10002 的金额是 301 元", ("公司的退货地址是上海市浦东新区 88 号", "agent")) == \
        ["added", "duplicate"]


@needs_cache
def test_a_users_scope_is_counted_per_user(app: Flask, client: FlaskClient, agent: str) -> None:
    mine = {"agent_id": agent, "session_id": "c-1", "user_id": "u-1"}
    theirs = {"agent_id": agent, "session_id": "c-2", "user_id": "u-2"}
    again = {"agent_id": agent, "session_id": "c-3", "user_id": "u-1"}
    both = ["session", "user"]
    write(client, mine, "订单 10001 的金额是 300 元", ("我的会员号是 VIP-0001", "user"))
    assert current(app, mine, both)
    write(client, theirs, ("我的会员号是 VIP-0002", "user"))  # another user's scope: not read by `mine`
    assert current(app, mine, both)
    assert write(client, again, ("我的收货城市是杭州", "user")) == ["added"]  # the same user, another conversation
    assert not current(app, mine, both)
    assert write(client, mine, "订单 10002 的金额是 301 元", ("我的收货城市是杭州", "user")) == ["added", "duplicate"]
