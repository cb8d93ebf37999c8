"""The real server process on loopback: write, retrieve, SIGTERM, restart, still there."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import requests

from tests.conftest import ROOT, free_port, server_env, serving
from tests.conftest import start_server as start_test_server


def start_server(data: Path, port: int) -> subprocess.Popen[bytes]:
    return start_test_server(data, port, stderr=subprocess.PIPE)  # stop() reads and closes stderr


def stop(process: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> int:
    process.send_signal(sig)
    process.wait(timeout=30)
    assert process.stderr is not None
    process.stderr.close()
    return process.returncode


def test_write_retrieve_survives_restart(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    ns = {"agent_id": "cs-bot", "session_id": "conv-1"}
    process = start_server(tmp_path, port)
    try:
        health = requests.get(f"{base}/healthz", timeout=10).json()
        assert health["store"]["kind"] == "milvus-lite"
        written = requests.post(f"{base}/v1/nodes/memory_write", timeout=30, json={
            **ns, "items": [{"kind": "identity", "content": "我是VIP客户，已开通自动退款", "turn": 10},
                            {"kind": "fact", "content": "The order number is ORD-20250317-8821", "turn": 3}]})
        assert written.status_code == 200 and [r["action"] for r in written.json()["results"]] == ["added", "added"]
    finally:
        assert stop(process) == 0
    process = start_server(tmp_path, port)
    try:
        found = requests.post(f"{base}/v1/nodes/memory_retrieve", timeout=30,
                              json={**ns, "query": "我是什么会员？", "top_k": 1}).json()
        assert found["text"] == "[来自记忆 · 身份 · 第10轮] 我是VIP客户，已开通自动退款"
        english = requests.post(f"{base}/v1/nodes/memory_retrieve", timeout=30,
                                json={**ns, "query": "what was my order number?", "top_k": 1}).json()
        assert english["text"] == "[from memory · fact · turn 3] The order number is ORD-20250317-8821"
    finally:
        assert stop(process, signal.SIGINT) == 0


def test_second_process_on_the_same_lite_file_gets_a_clear_error(tmp_path: Path) -> None:
    port = free_port()
    process = start_server(tmp_path, port)
    try:
        env = server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"))
        second = subprocess.run([sys.executable, "server.py", "--port", str(free_port())], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=60)
        assert second.returncode != 0
        assert "another process has it open" in second.stderr
        assert "Traceback" not in second.stderr
    finally:
        stop(process)


def test_a_bad_setting_names_its_variable_and_stops(tmp_path: Path) -> None:
    env = server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"), ACN_PORT="eighty", ACN_THREADS="0")
    started = subprocess.run([sys.executable, "server.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=60)
    assert started.returncode == 2
    assert "cannot start" in started.stderr and "ACN_PORT" in started.stderr and "ACN_THREADS" in started.stderr
    assert "Traceback" not in started.stderr
    assert not (tmp_path / "memory.db").exists()  # nothing was opened


def test_a_taken_port_is_a_clear_error_and_leaves_the_store_usable(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"))
        started = subprocess.run([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=env,
                                 capture_output=True, text=True, timeout=60)
    assert started.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in started.stderr and "Traceback" not in started.stderr
    free = free_port()
    process = start_server(tmp_path, free)  # the store was closed, not left locked
    try:
        assert requests.get(f"http://127.0.0.1:{free}/healthz", timeout=10).status_code == 200
    finally:
        assert stop(process) == 0


def test_oversized_bodies_are_refused_and_the_largest_are_not_buffered() -> None:
    limit = 50_000
    with serving(ACN_MAX_BODY_BYTES=str(limit)) as base:
        def send(size: int) -> requests.Response:
            body = {"agent_id": "a", "session_id": "s", "items": [{"kind": "fact", "content": "x" * (size // 2)}]}
            return requests.post(f"{base}/v1/nodes/memory_write", json=body, timeout=30)
        over = send(3 * limit)  # the app's own answer: the JSON envelope
        assert over.status_code == 413 and over.json()["code"] == "payload_too_large"
        huge = send(20 * limit)  # beyond what waitress buffers for the app (BODY_BUFFER_FACTOR)
        assert huge.status_code == 413
        assert send(limit // 4).status_code == 200  # and the server goes on serving
