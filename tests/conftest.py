"""Fixtures: a real app on a tmp Milvus Lite file, a Lite server process, unique namespaces."""

from __future__ import annotations

import itertools
import os
import random
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.common.settings import Settings
from acn.server import create_app
from acn.text.tokens import Tokenizer, load_tokenizer

pytest_plugins = ["tests.fake_llm"]

ROOT = Path(__file__).resolve().parent.parent
# `make test-engine` sets TEST_ENGINE=cpp-lite: the store and node tests then run on the C++ Milvus Lite 2.5
# (embedded only, in .venv-engine) with the in-process index off, so every read is the engine's answer.
ENGINE = os.environ.get("TEST_ENGINE", "")
_counter = itertools.count()


def missing_prerequisite(message: str) -> None:
    """Stop a test whose prerequisite (Python 3.12, Chromium) is missing: a failure under CI=true, where every
    test must run, else a skip whose reason `pytest -ra` prints in the summary."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{message} (CI=true: required)")
    pytest.skip(f"SKIPPED, prerequisite missing: {message}")


# Where free_port chooses (see there): below Linux's default ephemeral range, above most services' ports.
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
CHOSEN_PORTS = (20000, 32767)
PORT_TRIES = 200
_GIVEN_PORTS: set[int] = set()


def free_port() -> int:
    """Return a free TCP port on loopback for a server a test starts, outside the kernel's ephemeral range.

    The kernel hands out ports of that range on its own: to every socket bound to port 0 (a Milvus Lite server, a
    stub) and as the source port of every outgoing connection. A port chosen there could be taken by one of those
    between this call and the server's bind (`python server.py` then exits 2, "cannot listen": a test that failed
    now and then when another run shared the machine). Below the range only another explicit choice can take it,
    and this process never gives the same port twice.
    """
    top = min(CHOSEN_PORTS[1], ephemeral_low() - 1)
    rng = random.Random()
    for _ in range(PORT_TRIES if top >= CHOSEN_PORTS[0] else 0):
        port = rng.randint(CHOSEN_PORTS[0], top)
        if port not in _GIVEN_PORTS and bindable(port):
            _GIVEN_PORTS.add(port)
            return port
    with socket.socket() as sock:  # no room below the range (or every try taken): let the kernel choose
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ephemeral_low() -> int:
    """Return the first port of the kernel's ephemeral range (Linux's default 32768 when it cannot be read)."""
    try:
        return int(EPHEMERAL_RANGE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def bindable(port: int) -> bool:
    """Return True when nothing holds the port on loopback now."""
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def wait_for_port(port: int, timeout: float = 30.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Wait until something accepts connections on 127.0.0.1:port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode} before listening on {port}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise TimeoutError(f"nothing listened on port {port} within {timeout}s")


def make_settings(path: Path, **overrides: Any) -> Settings:
    """Return settings for a test app on a Lite file under path."""
    # The model cache stays under the test's folder, not in the user's ~/.cache.
    # BM25 only unless a test asks for an embedder: the product's default (`use`) loads a model, which a test of
    # anything else need not pay for, and its ranking is pinned by the tests that name it.
    values: dict[str, Any] = {"milvus_uri": str(path / "memory.db"), "log_level": "WARNING",
                              "cache_dir": str(path / "cache"), "embedder": "none"}
    if ENGINE:
        values["local_index_rows"] = 0
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session", autouse=True)
def _engine_rules() -> None:
    """On the engine run, repositories built directly by tests keep no in-process index either."""
    if ENGINE:
        from acn.storage.repositories.memories import MemoryRepository

        MemoryRepository.__init__.__kwdefaults__["index_rows"] = 0


@pytest.fixture(scope="session")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    """One app for the session on a real Milvus Lite file (tests isolate themselves by namespace)."""
    application = create_app(make_settings(tmp_path_factory.mktemp("store")))
    yield application
    application.extensions["acn"].close()


@pytest.fixture()
def client(app: Flask) -> FlaskClient:
    return app.test_client()


@pytest.fixture()
def ns() -> dict[str, str]:
    """A namespace no other test uses."""
    tag = f"{next(_counter)}-{uuid.uuid4().hex[:8]}"
    return {"agent_id": f"agent-{tag}", "session_id": f"session-{tag}"}


@pytest.fixture()
def fresh_app(tmp_path: Path) -> Iterator[Flask]:
    """An app with a store of its own, for tests that restart or count everything."""
    application = create_app(make_settings(tmp_path))
    yield application
    application.extensions["acn"].close()


def start_lite_server(data_dir: Path, port: int) -> subprocess.Popen[bytes]:
    """Start `python -m milvus_lite server` on loopback (not waiting for it); its output goes to data_dir/server.log."""
    with open(data_dir / "server.log", "ab") as log_file:
        return subprocess.Popen(
            [sys.executable, "-m", "milvus_lite", "server", "--data-dir", str(data_dir),
             "--host", "127.0.0.1", "--port", str(port)],
            stdout=log_file, stderr=subprocess.STDOUT,
        )


def wait_for_store(uri: str, timeout: float = 60.0) -> None:
    """Wait until a Milvus server answers a gRPC call (an open port is not yet a ready server)."""
    from acn.storage.database import MilvusStore, open_store

    store = open_store(lambda: MilvusStore(uri), timeout)
    try:
        store._call(lambda client: client.list_collections())
    finally:
        store.close()


@pytest.fixture(scope="session")
def lite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Milvus Lite server process on loopback: the same network path as a Milvus server.

    One process serves the whole session, so a connection to it may sit idle for minutes between the tests that
    use it: each store opens and closes a channel of its own, with keepalive the server tolerates
    (acn/storage/database/milvus_setup.py GRPC_OPTIONS); a store left open by a test cannot poison the next test's connection.
    """
    if ENGINE:
        pytest.skip("the C++ Milvus Lite runs embedded only (no server mode)")
    port = free_port()
    data_dir = tmp_path_factory.mktemp("lite-server")
    process = start_lite_server(data_dir, port)
    try:
        wait_for_port(port, process=process)
        wait_for_store(f"http://127.0.0.1:{port}")
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_process(process, timeout=15)

class CountingTokenizer(Tokenizer):
    """The default tokenizer, saying which texts it was asked to count."""

    def __init__(self) -> None:
        base = load_tokenizer()
        super().__init__(base.encoding, base.name)
        self.asked: list[str] = []

    def count(self, text: str) -> int:
        self.asked.append(text)
        return super().count(text)


def post(client: FlaskClient, node: str, body: dict[str, Any], **kwargs: Any) -> Any:
    """POST a node request and return the response."""
    return client.post(f"/v1/nodes/{node}", json=body, **kwargs)


def focused_memory_text(client: FlaskClient, namespace: dict[str, str], user_input: str, max_tokens: int = 300) -> str:
    """Return the memory layer of a focused assemble for the input, with no recent turns (retrieval alone)."""
    body = post(client, "assemble", {**namespace, "mode": "focused", "max_tokens": max_tokens, "messages": [],
                                     "user_input": user_input}).get_json()
    return str(body["memory_text"])


def assert_error(response: Any, status: int, code: str | None = None) -> dict[str, Any]:
    """Assert the canonical error envelope and return its body."""
    assert response.status_code == status, response.get_data(as_text=True)
    body = response.get_json()
    assert body["ok"] is False
    assert body["status"] == status
    assert isinstance(body["error"], str) and body["error"]
    assert isinstance(body["errors"], list) and body["errors"]
    assert body["request_id"]
    assert "Traceback" not in response.get_data(as_text=True)
    if code is not None:
        assert body["code"] == code
    return body


def server_env(**extra: str) -> dict[str, str]:
    """Return an environment for a server subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ACN_")}
    # The model cache stays out of the user's ~/.cache (one folder for the whole run: later starts reuse it).
    env["ACN_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), f"acn-test-model-cache-{os.getuid()}")
    env["ACN_EMBEDDER"] = "none"  # as make_settings: BM25 only unless the test names an embedder
    env.update(extra)
    return env


def start_server(data_dir: Path, port: int, *, stderr: int = subprocess.DEVNULL, **env: str) -> subprocess.Popen[bytes]:
    """Start `python server.py` on loopback over data_dir/memory.db (plus the ACN_* env given); wait until it listens."""
    environment = server_env(**{"ACN_MILVUS_URI": str(data_dir / "memory.db"), "ACN_LOG_LEVEL": "WARNING", **env})
    process = subprocess.Popen([sys.executable, "server.py", "--port", str(port)], cwd=ROOT, env=environment,
                               stdout=subprocess.DEVNULL, stderr=stderr)
    wait_for_port(port, timeout=60, process=process)
    return process


def stop_process(process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Stop a child process: SIGTERM, then SIGKILL if it has not exited within the timeout."""
    process.terminate()
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def serving(**settings: str) -> Iterator[str]:
    """Run `python server.py` on a fresh store (or the ACN_* settings given) and yield its base URL."""
    port = free_port()
    with tempfile.TemporaryDirectory() as folder:
        process = start_server(Path(folder), port, **settings)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            stop_process(process, timeout=60)


def record_filters(store: Any) -> list[str]:
    """Spy on a store's queries: return the list each query's filter template is appended to (the query still runs).

    For tests that pin which filters reach Milvus Lite (it scans the collection for anything but a primary-key
    lookup)."""
    filters: list[str] = []
    query = store.query

    def recorded(collection: str, where: Any, **kwargs: Any) -> Any:
        filters.append(where.template)
        return query(collection, where, **kwargs)

    store.query = recorded
    return filters
