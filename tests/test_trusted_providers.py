"""Provider answers are data (issue 35): a total deadline per call, JSON and numbers checked, the request degraded.

The embeddings endpoint is a real loopback stand-in (tests/stand_in_http.py) that answers stored passages
normally and a query with what a broken or hostile server could send: 400-digit numbers, 50,000 nested brackets,
NaN, or a valid answer dripped one byte at a time. Each used to be a 500 (OverflowError, RecursionError) or a
request held far past its timeout; now the search answers from BM25 alone and says so (`degraded`), and /metrics
counts it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from acn.server import create_app
from tests.conftest import make_settings, post
from tests.stand_in_http import Drip, StandIn, serve_loopback, stand_in

DIM = 8
NS = {"agent_id": "agent-prov", "session_id": "session-prov"}
FACT = "the reconciliation timeout is 30 seconds"


def vectors(count: int) -> dict[str, Any]:
    return {"data": [{"index": i, "embedding": [0.1 * (j + 1) for j in range(DIM)]} for i in range(count)]}


VALID_QUERY = json.dumps(vectors(1)).encode()
BAD_QUERIES: dict[str, Any] = {
    "400-digit number": ('{"data": [{"index": 0, "embedding": [1' + "0" * 400 + ", 0, 0, 0, 0, 0, 0, 0]}]}").encode(),
    "50,000 nested brackets": b"[" * 50_000 + b"]" * 50_000,
    "NaN": b'{"data": [{"index": 0, "embedding": [NaN, 0, 0, 0, 0, 0, 0, 0]}]}',
    "a valid answer dripped": Drip(VALID_QUERY, 0.05),
}


def embeddings(query_answer: Any) -> Any:
    """Passages answered normally (the background worker), queries with query_answer."""
    def answer(path: str, headers: dict[str, str], body: Any) -> tuple[int, Any, dict[str, str]]:
        if body.get("input_type") == "query":
            return 200, query_answer, {}
        return 200, vectors(len(body["input"])), {}
    return answer


@contextmanager
def embedder_app(tmp_path: Path, server: StandIn, **settings: Any) -> Iterator[Flask]:
    values: dict[str, Any] = {"embedder": "openai", "embedding_model": "m", "embedding_dim": DIM,
                              "embedding_base_url": server.url + "/v1", "embedding_input_type": True,
                              "embedding_timeout_seconds": 1.0, "provider_backoff_seconds": 0, **settings}
    app = create_app(make_settings(tmp_path, **values))
    try:
        client = app.test_client()
        assert post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": FACT}]}).status_code == 200
        backlog = app.extensions["acn"].backlog
        assert backlog is not None and backlog.drain(timeout=30)  # the passage's vector is stored
        yield app
    finally:
        app.extensions["acn"].close()


def query_calls(server: StandIn) -> int:
    return sum(1 for r in server.requests if r["json"].get("input_type") == "query")


@pytest.mark.parametrize("answer", list(BAD_QUERIES), ids=list(BAD_QUERIES))
def test_a_malformed_or_dripping_embedder_degrades_search_to_bm25(tmp_path: Path, answer: str) -> None:
    with stand_in(embeddings(BAD_QUERIES[answer])) as server, embedder_app(tmp_path, server) as app:
        client = app.test_client()
        found = post(client, "memory_retrieve", {**NS, "query": "reconciliation timeout", "kinds": ["turn"]})
        assert found.status_code == 200, found.get_data(as_text=True)
        # A dripped answer is cut at the call's deadline, not read to its end.
        assert all(sent < total for sent, total in server.dripped)
        body = found.get_json()
        assert body["degraded"] == {"dense": "unavailable"}
        assert [m["content"] for m in body["memories"]] == [FACT]  # BM25 alone still finds it
        assembled = post(client, "assemble", {**NS, "user_input": "what is the reconciliation timeout?",
                                              "mode": "focused", "max_tokens": 2000})
        assert assembled.status_code == 200, assembled.get_data(as_text=True)
        assert assembled.get_json()["degraded"] == {"dense": "unavailable"}
        metrics = client.get("/metrics").get_data(as_text=True)
        assert 'acn_degraded_total{node="memory_retrieve",part="dense"} 1.0' in metrics
        assert 'acn_degraded_total{node="assemble",part="dense"} 1.0' in metrics


def test_a_healthy_embedder_is_not_reported_degraded(tmp_path: Path) -> None:
    with stand_in(embeddings(vectors(1))) as server, embedder_app(tmp_path, server) as app:
        body = post(app.test_client(), "memory_retrieve", {**NS, "query": "reconciliation timeout"}).get_json()
        assert body["degraded"] == {} and body["memories"][0]["score_parts"]["dense"] > 0


def test_a_failing_embedder_is_not_asked_again_during_its_backoff(tmp_path: Path) -> None:
    with stand_in(embeddings(BAD_QUERIES["50,000 nested brackets"])) as server, \
            embedder_app(tmp_path, server, provider_backoff_seconds=60) as app:
        client = app.test_client()
        for _ in range(3):
            body = post(client, "memory_retrieve", {**NS, "query": "reconciliation timeout"}).get_json()
            assert body["degraded"] == {"dense": "unavailable"}
        assert query_calls(server) == 1


def test_dripping_providers_hold_their_own_threads_not_the_requests(tmp_path: Path) -> None:
    """Twelve searches at once against an embedder that drips: at most ACN_PROVIDER_MAX_CONCURRENT calls reach it,
    the others go on without it at once, every search answers, and /healthz answers meanwhile."""
    with stand_in(embeddings(Drip(VALID_QUERY, 0.2))) as server, \
            embedder_app(tmp_path, server, provider_max_concurrent=2, embedding_timeout_seconds=3.0) as app:
        results: list[dict[str, Any]] = []

        def search() -> None:
            response = post(app.test_client(), "memory_retrieve", {**NS, "query": "reconciliation timeout"})
            results.append({"status": response.status_code, **(response.get_json() or {})})

        threads = [threading.Thread(target=search) for _ in range(12)]
        for thread in threads:
            thread.start()
        assert app.test_client().get("/healthz").status_code == 200
        for thread in threads:
            thread.join(timeout=60)
        assert server.most_in_flight <= 2
        assert [r["status"] for r in results] == [200] * 12
        assert all(r["degraded"] == {"dense": "unavailable"} for r in results)


def test_an_embedder_that_drips_its_headers_is_left_at_the_deadline(tmp_path: Path) -> None:
    """The status line at once, then the headers one byte every 50 ms (about 10 s in all): a read timeout never
    fires, since every read gets a byte. The search answers degraded while the headers are still dripping."""
    state: dict[str, Any] = {"sent": 0, "total": 0}
    stop = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
            if body.get("input_type") != "query":
                data = json.dumps(vectors(len(body["input"]))).encode()
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                                 + str(len(data)).encode() + b"\r\n\r\n" + data)
                return
            headers = b"X-Padding: " + b"p" * 200 + b"\r\n"
            state["total"] = len(headers)
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.wfile.flush()
            try:
                while state["sent"] < len(headers) and not stop.wait(0.05):
                    self.wfile.write(headers[state["sent"]:state["sent"] + 1])
                    self.wfile.flush()
                    state["sent"] += 1
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Keep the stub's access log out of the test output."""

    with serve_loopback(Handler, on_stop=stop.set) as url:
        with embedder_app(tmp_path, StandIn(url=url)) as app:
            found = post(app.test_client(), "memory_retrieve", {**NS, "query": "reconciliation timeout"})
            assert state["sent"] < state["total"]  # answered while the headers were still coming
            assert found.status_code == 200 and found.get_json()["degraded"] == {"dense": "unavailable"}
