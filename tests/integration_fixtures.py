"""Session fixtures of the integration tests, loaded with `pytest_plugins = ("tests.integration_fixtures",)`
so one server and one sandbox serve every integration module."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import pytest

from tests.conftest import free_port, start_server, stop_process
from tests.integration_support import API_KEY, TENANT, LiveServer, SandboxHandler


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The real server process with one API key (tenant `integration`)."""
    port = free_port()
    process = start_server(tmp_path_factory.mktemp("live-server"), port, ACN_API_KEYS=f"{API_KEY}:{TENANT}")
    try:
        yield LiveServer(f"http://127.0.0.1:{port}", API_KEY)
    finally:
        stop_process(process)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[str]:
    """A loopback stand-in for Dify's code sandbox; yields its endpoint."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), SandboxHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
