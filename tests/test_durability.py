"""Acknowledged writes survive a SIGKILL mid-storm; a stopped Milvus server is a 503 that heals by itself."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from acn.server import create_app
from tests.conftest import assert_error, free_port, make_settings, post, start_server, stop_process, wait_for_port

WRITERS, WRITES_PER_WRITER = 4, 500


def test_acknowledged_writes_survive_sigkill_during_a_write_storm(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    process = start_server(tmp_path, port)
    acknowledged: list[str] = []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(worker: int) -> None:
        session = requests.Session()
        for i in range(WRITES_PER_WRITER):
            if stop.is_set():
                return
            body = {"agent_id": "storm", "session_id": f"w{worker}",
                    "items": [{"kind": "fact", "content": f"写入者{worker} 第{i}条 编号 S{worker}-{i:04d}"}]}
            try:
                response = session.post(f"{base}/v1/nodes/memory_write", json=body, timeout=10)
            except requests.RequestException:
                return  # the server died under us: this write was never acknowledged
            if response.status_code == 200:
                with lock:
                    acknowledged.append(response.json()["results"][0]["id"])
        session.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(WRITERS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 120
    while len(acknowledged) < WRITERS * WRITES_PER_WRITER * 0.6 and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert len(acknowledged) >= 1000, "the storm must be well under way before the kill"

    process = start_server(tmp_path, port)
    try:
        stored: set[str] = set()
        for worker in range(WRITERS):
            offset: int | None = 0
            while offset is not None:
                page = requests.get(f"{base}/v1/memories", timeout=30, params={
                    "agent_id": "storm", "session_id": f"w{worker}", "limit": 1000, "offset": offset}).json()
                stored |= {m["id"] for m in page["memories"]}
                offset = page["next_offset"]
        missing = set(acknowledged) - stored
        assert missing == set(), f"{len(missing)} of {len(acknowledged)} acknowledged writes lost"
    finally:
        stop_process(process)


@pytest.fixture()
def milvus_server(tmp_path: Path) -> Iterator[dict[str, object]]:
    """A Milvus Lite server process we can stop and start again on the same port and data."""
    port = free_port()
    data = tmp_path / "milvus"
    handle: dict[str, object] = {"uri": f"http://127.0.0.1:{port}"}

    def start() -> None:
        process = subprocess.Popen([sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(data),
                                    "--host", "127.0.0.1", "--port", str(port)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(port, process=process)
        handle["process"] = process

    def stop() -> None:
        process = handle["process"]
        assert isinstance(process, subprocess.Popen)
        stop_process(process)

    handle["start"], handle["stop"] = start, stop
    start()
    yield handle
    stop()


def test_a_stopped_milvus_server_is_503_then_recovers_without_restart(tmp_path: Path,
                                                                      milvus_server: dict[str, object]) -> None:
    app = create_app(make_settings(tmp_path, milvus_uri=str(milvus_server["uri"])))
    try:
        client = app.test_client()
        ns = {"agent_id": "a", "session_id": "s"}
        assert post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "订单 ORD-1"}]}
                    ).status_code == 200
        milvus_server["stop"]()  # type: ignore[operator]
        down = post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "订单 ORD-2"}]})
        assert_error(down, 503, "store_unavailable")
        assert down.headers["Retry-After"] == "5"
        assert_error(post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "订单 ORD-3"}]}), 503)
        assert_error(post(client, "assemble", {**ns, "user_input": "订单"}), 503)
        milvus_server["start"]()  # type: ignore[operator]
        deadline = time.monotonic() + 30  # gRPC reconnects with a back-off of about a second
        back = post(client, "memory_retrieve", {**ns, "query": "订单", "top_k": 5})
        while back.status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.5)
            back = post(client, "memory_retrieve", {**ns, "query": "订单", "top_k": 5})
        assert back.status_code == 200, back.get_data(as_text=True)
        assert [m["content"] for m in back.get_json()["memories"]] == ["订单 ORD-1"]
        assert post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "订单 ORD-3"}]}
                    ).status_code == 200
    finally:
        app.extensions["acn"].close()
