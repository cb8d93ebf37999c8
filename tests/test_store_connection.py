"""The store's connection to a Milvus server: keepalive a server tolerates, a channel per store, a bounded wait.

Milvus Lite's server (grpcio with its defaults) answers a client that pings an idle connection every 10 s
(pymilvus's default) with GOAWAY too_many_pings after ~30-45 s; a server that starts after this one must be
waited for, not crash the start.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from common.errors import StoreUnavailableError
from storage.milvus import GRPC_OPTIONS, MilvusStore, open_store
from tests.conftest import ROOT, free_port, server_env, start_lite_server, stop_lite_server, wait_for_port

# grpcio's server defaults (what `python -m milvus_lite server` runs with): pings on a connection with no call
# in flight are refused, and otherwise at most one per 5 minutes without data.
SERVER_MIN_PING_INTERVAL_MS = 300_000


def channel_states(store: MilvusStore) -> list[grpc.ChannelConnectivity]:
    """Record the connectivity states of the store's channel from now on."""
    states: list[grpc.ChannelConnectivity] = []
    store._require()._handler._channel.subscribe(states.append)
    return states


def test_keepalive_is_within_what_the_lite_server_allows(lite_server: str) -> None:
    store = MilvusStore(lite_server).open()
    try:
        options = store._require()._handler._grpc_options
        assert options == GRPC_OPTIONS
        assert options["grpc.keepalive_permit_without_calls"] == 0, "an idle connection must not ping"
        assert options["grpc.keepalive_time_ms"] >= SERVER_MIN_PING_INTERVAL_MS
    finally:
        store.close()


def test_each_store_has_its_own_channel_and_closing_one_leaves_the_other(lite_server: str) -> None:
    # pymilvus shares one channel per address by default and never closes it: the next store would inherit
    # a connection that had idled since the last test.
    first, second = MilvusStore(lite_server).open(), MilvusStore(lite_server).open()
    try:
        assert first._require()._handler is not second._require()._handler
        first.close()
        assert isinstance(second._call(lambda client: client.list_collections()), list)
    finally:
        first.close()
        second.close()


@pytest.mark.slow
def test_a_connection_idle_for_a_minute_is_not_sent_away(lite_server: str) -> None:
    # With pymilvus's defaults the channel receives GOAWAY too_many_pings after ~40-45 s and drops to IDLE.
    store = MilvusStore(lite_server).open()
    try:
        store._call(lambda client: client.list_collections())
        states = channel_states(store)
        time.sleep(60)
        # The GOAWAY comes with the first call after the quiet spell (the client's overdue ping goes out with
        # it: the third strike): that call, or the next, met a closing connection.
        for _ in range(3):
            assert isinstance(store._call(lambda client: client.list_collections()), list)
        time.sleep(2)
        assert [s for s in states if s != grpc.ChannelConnectivity.READY] == [], states
    finally:
        store.close()


def test_open_store_waits_for_a_server_that_starts_late(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    port = free_port()
    started: list[subprocess.Popen[bytes]] = []
    timer = threading.Timer(3.0, lambda: started.append(start_lite_server(tmp_path, port)))
    timer.start()
    try:
        with caplog.at_level(logging.WARNING, logger="acn.store"):
            store = open_store(lambda: MilvusStore(f"http://127.0.0.1:{port}"), wait_seconds=120)
        try:
            assert isinstance(store._call(lambda client: client.list_collections()), list)
        finally:
            store.close()
        retries = [r for r in caplog.records if r.getMessage() == "store not ready; retrying"]
        assert retries and all(isinstance(getattr(r, "retry_in_seconds", None), float) for r in retries)
    finally:
        timer.cancel()
        timer.join()
        for process in started:
            stop_lite_server(process)


def test_open_store_gives_up_after_its_bound(tmp_path: Path) -> None:
    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    began = time.monotonic()
    with pytest.raises(StoreUnavailableError):
        open_store(lambda: MilvusStore(uri), wait_seconds=0)
    with pytest.raises(StoreUnavailableError):
        open_store(lambda: MilvusStore(uri), wait_seconds=3)
    assert time.monotonic() - began < 60  # one short attempt, then ~3 s of retries (wide margin: loaded machine)


def test_a_lite_file_is_not_waited_for(tmp_path: Path) -> None:
    sleeps: list[float] = []
    (tmp_path / "taken").write_text("")  # a file where the folder should be: opening fails at once
    with pytest.raises(StoreUnavailableError):
        open_store(lambda: MilvusStore(str(tmp_path / "taken" / "memory.db")), wait_seconds=60,
                   sleep=sleeps.append)
    assert sleeps == []


def test_the_server_process_waits_for_its_store_and_says_so(tmp_path: Path) -> None:
    store_port, port = free_port(), free_port()
    env = server_env(ACN_MILVUS_URI=f"http://127.0.0.1:{store_port}", ACN_STORE_WAIT_SECONDS="120",
                     ACN_LOG_LEVEL="INFO")
    log_path = tmp_path / "server.log"
    lite: subprocess.Popen[bytes] | None = None
    with open(log_path, "wb") as log_file:
        process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=env,
                                   stdout=log_file, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while b"store not ready" not in log_path.read_bytes():
            assert process.poll() is None, log_path.read_text()
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.2)
        (tmp_path / "lite").mkdir()
        lite = start_lite_server(tmp_path / "lite", store_port)
        wait_for_port(port, timeout=120, process=process)  # type: ignore[arg-type]
        import requests

        health: dict[str, Any] = requests.get(f"http://127.0.0.1:{port}/healthz", timeout=30).json()
        assert health["store"]["kind"] == "milvus-server"
    finally:
        process.terminate()
        process.wait(timeout=60)
        if lite is not None:
            stop_lite_server(lite)
