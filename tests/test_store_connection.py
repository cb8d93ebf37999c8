"""The store's connection to a Milvus server: keepalive a server tolerates, a channel per store, a bounded wait.

Milvus Lite's server (grpcio with its defaults) answers a client that pings an idle connection every 10 s
(pymilvus's default) with GOAWAY too_many_pings after ~30-45 s; a server that starts after this one must be
waited for, not crash the start.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from acn.common.errors import StoreUnavailableError
from acn.storage.database.milvus import MilvusStore
from acn.storage.database.milvus_setup import GRPC_OPTIONS, open_store
from tests.conftest import ROOT, free_port, server_env, start_lite_server, stop_process, wait_for_port

# grpcio's server defaults (what `python -m milvus_lite server` runs with): pings on a connection with no call
# in flight are refused, and otherwise at most one per 5 minutes without data.
SERVER_MIN_PING_INTERVAL_MS = 300_000


class PingCountingProxy:
    """A loopback TCP proxy in front of a gRPC server that counts the HTTP/2 PING frames clients send.

    Lite's server strikes every ping on a connection with no call in flight; the third strike is the GOAWAY, which
    the client meets at its next call. Counting the pings an idle connection sends is the deterministic check.
    """

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.pings: list[float] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, from_client: bool) -> None:
        buffer = b""
        preface_left = len(self.PREFACE) if from_client else 0
        try:
            while data := source.recv(65536):
                sink.sendall(data)
                if not from_client:
                    continue
                buffer += data
                if preface_left:
                    skipped = min(preface_left, len(buffer))
                    buffer, preface_left = buffer[skipped:], preface_left - skipped
                while len(buffer) >= 9:  # HTTP/2 frame: 24-bit length, type, flags, stream id, payload
                    length = int.from_bytes(buffer[:3], "big")
                    if len(buffer) < 9 + length:
                        break
                    if buffer[3] == 0x6 and not buffer[4] & 0x1:  # PING, not an ACK
                        self.pings.append(time.monotonic())
                    buffer = buffer[9 + length:]
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


@pytest.fixture()
def ping_proxy(lite_server: str) -> Iterator[PingCountingProxy]:
    proxy = PingCountingProxy(int(lite_server.rsplit(":", 1)[1]))
    yield proxy
    proxy.close()


def test_an_idle_connection_sends_no_pings(ping_proxy: PingCountingProxy) -> None:
    # With pymilvus's defaults a keepalive ping goes out 10 s into the quiet (and another with the next call): with
    # the one that follows every response (grpc's bandwidth probe), that is the third strike, the GOAWAY.
    store = MilvusStore(f"http://127.0.0.1:{ping_proxy.port}").open()
    try:
        store._call(lambda client: client.list_collections())
        quiet_from = time.monotonic() + 2  # the bandwidth probe right after the response is not a keepalive
        time.sleep(25)
        assert [round(t - quiet_from, 1) for t in ping_proxy.pings if t >= quiet_from] == []
        assert isinstance(store._call(lambda client: client.list_collections()), list)
    finally:
        store.close()


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
    # The end-to-end check (the regression test is test_an_idle_connection_sends_no_pings: whether the GOAWAY
    # lands depends on whether the client's overdue ping beats the server's answer to the next call, a race
    # that a loaded machine loses more often).
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
            stop_process(process, timeout=15)


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
            stop_process(lite, timeout=15)
