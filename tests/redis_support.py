"""A real redis-server on a free loopback port with a temporary folder (no persistence), and server processes.

Debian's redis-server (`make redis` installs it as root); a test that needs it fails when it is missing under
CI=true and is skipped with the reason elsewhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import ROOT, free_port, server_env, wait_for_port


class RedisServer:
    """One redis-server process that a test can stop and start again on the same port."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            # Like the browser tests: CI must have it, a developer without root is told why they did not run.
            reason = "redis-server is missing: run `make redis` as root (Debian's redis-server package)"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        # No RDB, no AOF: a restart starts empty, the worst case for the fencing counters.
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.folder), "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_for_port(self.port, timeout=15, process=self.process)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=15)
        self.process = None


@contextmanager
def redis_server() -> Iterator[RedisServer]:
    """Run redis-server for the block."""
    with tempfile.TemporaryDirectory() as folder:
        server = RedisServer(Path(folder)).start()
        try:
            yield server
        finally:
            server.stop()


def start_replica(milvus_uri: str, port: int, **env: str) -> subprocess.Popen[bytes]:
    """Start one `python server.py` replica on loopback against a shared Milvus server URI."""
    environment = server_env(ACN_MILVUS_URI=milvus_uri, ACN_LOG_LEVEL="WARNING", **env)
    return subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=environment,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@contextmanager
def replicas(milvus_uri: str, count: int, **env: str) -> Iterator[list[tuple[str, subprocess.Popen[bytes]]]]:
    """Run `count` replicas at once (they start in parallel) and yield (base URL, process) pairs."""
    started = []
    try:
        for _ in range(count):
            port = free_port()
            started.append((port, start_replica(milvus_uri, port, **env)))
        for port, process in started:
            wait_for_port(port, timeout=90, process=process)
        yield [(f"http://127.0.0.1:{port}", process) for port, process in started]
    finally:
        for _, process in started:
            if process.poll() is None:
                process.terminate()
        deadline = time.monotonic() + 30
        for _, process in started:
            try:
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
