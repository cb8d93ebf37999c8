"""No client stalls the server for the others (issue 49): slow request heads, answers never read, forwarded
addresses, one tenant's share of the request threads.

Each case runs against `python server.py` (waitress, 127.0.0.1 as its trusted proxy) and against the production
shape: Debian's nginx with deploy/nginx.conf in front of gunicorn (deploy/gunicorn.conf.py). Everything is on
loopback; loops are bounded in count, and every probe has a generous deadline (tests/serving_support.py).
"""

from __future__ import annotations

import json
import selectors
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, closing
from pathlib import Path

import pytest
from flask import Flask

from acn.app import serving
from acn.app.proxies import TrustedProxyFix, parse_trusted_proxies
from acn.nodes.memory_admin import PAGE_BYTES
from acn.server import create_app
from tests.conftest import assert_error, make_settings
from tests.serving_support import DEADLINE, Stack, call, gunicorn_server, nginx_in_front, python_server

KEY_A = "key-a-0123456789abcdef"  # the tenant that misbehaves
KEY_B = "key-b-0123456789abcdef"  # a tenant that must keep being served
A = {"Authorization": f"Bearer {KEY_A}"}
B = {"Authorization": f"Bearer {KEY_B}"}
THREADS = 4
SLOW_HEADS = 1000
UNREAD_CONNECTIONS = 8
BIG_ROWS = 1000
# 24 KB of UTF-8 per row, in meta (not tokenized, so the import takes seconds): 1,000 rows were a 24 MB answer.
PAD = "记" * 8000
CHANNEL_TIMEOUT = 5  # python server.py here: a connection idle this long is closed, an unread answer with it
ENV = {"ACN_API_KEYS": f"{KEY_A}:alpha,{KEY_B}:beta", "ACN_THREADS": str(THREADS),
       "ACN_TRUSTED_PROXIES": "127.0.0.1", "ACN_MAX_BODY_BYTES": "30000000", "ACN_LOG_LEVEL": "WARNING",
       "ACN_CHANNEL_TIMEOUT_SECONDS": str(CHANNEL_TIMEOUT)}


def big_rows(count: int = BIG_ROWS) -> bytes:
    rows = [{"id": f"big-{n:04d}", "kind": "fact", "content": f"row {n}", "importance": 5, "scope": "session",
             "agent_id": "big", "session_id": "s", "meta": {"pad": PAD}, "created_at": 1_700_000_000_000,
             "updated_at": 1_700_000_000_000, "version": 1} for n in range(count)]
    return json.dumps({"memories": rows}, ensure_ascii=False).encode()


def load_big_namespace(port: int) -> None:
    status, _, body = call(port, "POST", "/v1/memories/import", {**A, "Content-Type": "application/json"},
                           big_rows(), timeout=120)
    assert status == 200 and json.loads(body)["created"] == BIG_ROWS


@pytest.fixture(scope="module", params=["python server.py", "nginx + gunicorn"])
def stack(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    folder = tmp_path_factory.mktemp("serving")
    with ExitStack() as running:
        if request.param == "python server.py":
            served = running.enter_context(python_server(folder, **ENV))
            load_big_namespace(served.port)
            yield served
        else:
            upstream = running.enter_context(gunicorn_server(folder, **ENV))
            load_big_namespace(upstream)  # straight to gunicorn: the proxy takes bodies up to 4 MB only
            yield Stack("nginx + gunicorn", running.enter_context(nginx_in_front(folder, upstream)), forwarded=False)


def assert_served(stack: Stack) -> None:
    """/healthz and another tenant's calls are answered, each within the probe's deadline."""
    assert call(stack.port, "GET", "/healthz")[0] == 200
    status, _, body = call(stack.port, "GET", "/v1/memories?agent_id=other&limit=5", B)
    assert (status, json.loads(body)["memories"]) == (200, [])
    status, _, body = call(stack.port, "POST", "/v1/nodes/memory_retrieve", {**B, "Content-Type": "application/json"},
                           json.dumps({"agent_id": "other", "session_id": "s", "query": "hello"}).encode())
    assert status == 200, body


def refused(sockets: list[socket.socket], expected: int) -> int:
    """Return how many of `sockets` the server answered 429 and closed, waiting (bounded) until `expected` are.

    A refused connection whose head arrived before the close may be reset rather than read: that counts too; one
    closed quietly (end of file) is one the server kept and later closed as idle, and does not.
    """
    found: set[socket.socket] = set()
    deadline = time.monotonic() + DEADLINE
    with selectors.DefaultSelector() as selector:
        for sock in sockets:
            selector.register(sock, selectors.EVENT_READ)
        while len(found) < expected and time.monotonic() < deadline:
            for key, _ in selector.select(timeout=0.5):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                selector.unregister(sock)
                try:
                    answer = sock.recv(4096, socket.MSG_PEEK)
                except ConnectionResetError:
                    answer = b"reset"
                if answer.startswith((b"HTTP/1.1 429 ", b"reset")):
                    found.add(sock)
    return len(found)


def test_half_sent_request_heads_cost_sockets_not_the_server(stack: Stack) -> None:
    # Each sends part of a request head and then a byte now and then, from one address that is not the trusted
    # proxy; waitress took 100 such connections (all it had) and gunicorn alone one thread each.
    with ExitStack() as held:
        sockets = [held.enter_context(closing(socket.create_connection(
            ("127.0.0.1", stack.port), timeout=DEADLINE, source_address=("127.0.0.2", 0)))) for _ in range(SLOW_HEADS)]
        for sock in sockets:
            try:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
            except OSError:
                pass  # python server.py closes connections past the address's cap
        assert_served(stack)
        if stack.per_address is not None:  # the rest were refused (429) and closed
            assert refused(sockets, SLOW_HEADS - stack.per_address) == SLOW_HEADS - stack.per_address
        for sock in sockets:
            try:
                sock.sendall(b"a")  # the next byte, as such a client sends it
            except OSError:
                pass  # nginx closes a head not complete within client_header_timeout
        assert_served(stack)


def test_a_forged_forwarded_address_changes_nothing(stack: Stack) -> None:
    # A client that is not the trusted proxy names a new X-Forwarded-For with each wrong key: it is still one
    # address, throttled after five (through nginx the header was passed on and believed: never throttled).
    source = "127.0.0.200"
    statuses = [call(stack.port, "GET", "/v1/memories?agent_id=x", {"Authorization": f"Bearer wrong-{n:016d}",
                                                                      "X-Forwarded-For": f"203.0.113.{n}"},
                     source=source)[0] for n in range(6)]
    assert statuses == [401] * 5 + [429]


def test_wrong_keys_lock_out_only_the_client_that_sent_them(stack: Stack) -> None:
    # Behind the trusted proxy, the client's own address is counted (waitress used to delete X-Forwarded-For, so
    # every client was the proxy's address and one guesser locked every tenant out).
    guesser, guesser_headers = stack.as_client(10)
    statuses = [call(stack.port, "GET", "/v1/memories?agent_id=x",
                     {**guesser_headers, "Authorization": f"Bearer wrong-{n:016d}"}, source=guesser)[0]
                for n in range(6)]
    assert statuses == [401] * 5 + [429]
    for number in (11, 12):
        source, headers = stack.as_client(number)
        status, _, _ = call(stack.port, "GET", "/v1/memories?agent_id=x", {**headers, **B}, source=source)
        assert status == 200


def test_answers_never_read_cost_a_buffer_not_the_server(stack: Stack) -> None:
    # One tenant: 8 connections, each with 2 pipelined list requests whose answers it never reads. Each was 24 MB;
    # waitress's request thread waited for the client once 16 MB were buffered, gunicorn's at once.
    request = ("GET /v1/memories?agent_id=big&limit=1000 HTTP/1.1\r\nHost: 127.0.0.1\r\n"
               f"Authorization: Bearer {KEY_A}\r\n\r\n").encode()
    with ExitStack() as held:
        for _ in range(UNREAD_CONNECTIONS):
            sock = held.enter_context(closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(DEADLINE)
            sock.connect(("127.0.0.1", stack.port))
            sock.sendall(request * 2)
        assert_served(stack)
        assert established(stack.port) >= UNREAD_CONNECTIONS
        if stack.processes:  # python server.py: the unread answers are dropped with their idle connections
            deadline = time.monotonic() + 6 * CHANNEL_TIMEOUT
            while established(stack.port) and time.monotonic() < deadline:
                time.sleep(0.5)
            assert established(stack.port) == 0


def established(port: int) -> int:
    """Return how many connections to `port` are open on the server's side (/proc/net/tcp: local port, state 01)."""
    rows = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for row in rows if row.split()[1].endswith(f":{port:04X}") and row.split()[3] == "01")


# -- in process ---------------------------------------------------------------------------


@pytest.fixture()
def two_tenants(tmp_path: Path) -> Iterator[Flask]:
    app = create_app(make_settings(tmp_path, api_keys=ENV["ACN_API_KEYS"], threads=THREADS,
                                   max_body_bytes=30_000_000))
    yield app
    app.extensions["acn"].close()


def test_a_tenant_past_its_share_of_the_threads_is_told_to_retry(two_tenants: Flask) -> None:
    client = two_tenants.test_client()
    share = two_tenants.extensions["acn_tenant_share"]
    assert share.limit == THREADS // 2
    held = [share.acquire("alpha") for _ in range(share.limit)]  # alpha's requests in progress
    body = assert_error(client.get("/v1/memories?agent_id=x", headers=A), 429, "tenant_busy")
    assert "ACN_TENANT_THREADS" in body["error"]
    assert client.get("/v1/memories?agent_id=x", headers=A).headers["Retry-After"] == "1"
    assert client.get("/v1/memories?agent_id=x", headers=B).status_code == 200  # beta has its own share
    assert client.get("/healthz").status_code == 200
    held[0]()
    assert client.get("/v1/memories?agent_id=x", headers=A).status_code == 200
    assert share.held("alpha") == share.limit - 1 and share.held("beta") == 0  # every request gave its slot back


def test_a_list_page_stops_before_its_byte_bound_and_paging_reaches_every_row(two_tenants: Flask) -> None:
    client = two_tenants.test_client()
    rows = 200  # 4.8 MB: three pages
    assert client.post("/v1/memories/import", data=big_rows(rows), headers={**A, "Content-Type": "application/json"},
                       ).get_json()["created"] == rows
    seen: list[str] = []
    offset: int | None = 0
    for _ in range(rows):  # bounded: every page holds at least one row
        response = client.get(f"/v1/memories?agent_id=big&limit=1000&offset={offset}", headers=A)
        assert len(response.data) < PAGE_BYTES + 10_000
        page = response.get_json()
        seen += [memory["id"] for memory in page["memories"]]
        offset = page["next_offset"]
        if offset is None:
            break
    assert seen == [f"big-{n:04d}" for n in range(rows)]


def test_forwarded_headers_of_an_untrusted_peer_never_reach_the_app() -> None:
    seen: dict[str, object] = {}

    def app(environ: dict[str, object], start_response: object) -> list[bytes]:
        seen.update(environ)
        return []

    fix = TrustedProxyFix(app, parse_trusted_proxies("10.0.0.1"))
    forwarded = {"HTTP_X_FORWARDED_FOR": "1.2.3.4", "HTTP_X_FORWARDED_HOST": "evil.example",
                 "HTTP_X_FORWARDED_PREFIX": "/x", "HTTP_FORWARDED": "for=1.2.3.4"}
    fix({"REMOTE_ADDR": "10.0.0.2", **forwarded}, None)
    assert not set(forwarded) & set(seen) and seen["REMOTE_ADDR"] == "10.0.0.2"
    seen.clear()
    fix({"REMOTE_ADDR": "10.0.0.1", "HTTP_X_FORWARDED_FOR": "1.2.3.4", "HTTP_HOST": "a"}, None)
    assert seen["REMOTE_ADDR"] == "1.2.3.4"


def test_python_server_keeps_no_more_connections_than_it_has_files_for(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = {"soft": 1024, "hard": 1024}
    monkeypatch.setattr(serving.resource, "getrlimit", lambda _kind: (limits["soft"], limits["hard"]))
    monkeypatch.setattr(serving.resource, "setrlimit", lambda _kind, pair: limits.update(soft=pair[0]))
    assert serving.raise_open_files(4000) == 1024 - serving.SPARE_FILES  # not 4,000: accept() would fail on every turn
    limits.update(soft=1024, hard=20000)
    assert serving.raise_open_files(4000) == 4000 and limits["soft"] == 4000 + serving.SPARE_FILES
