"""A real loopback HTTP server whose answers a test scripts with a function (rerank and embeddings stand-ins)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# (path, headers, parsed JSON body) -> (status, body, extra headers); a body that is not bytes is sent as JSON.
Answer = Callable[[str, dict[str, str], Any], tuple[int, Any, dict[str, str]]]


@dataclass(frozen=True)
class Drip:
    """An answer sent slowly: the headers (with the full Content-Length) at once, then `body` one byte every
    `every` seconds, until it is all sent, the client hangs up, or the stand-in stops."""

    body: bytes
    every: float


@dataclass
class StandIn:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    # Per dripped answer: how many of its bytes went out before it ended (a client that gave up stops it short).
    dripped: list[tuple[int, int]] = field(default_factory=list)
    in_flight: int = 0  # dripped answers being sent now, and the most at once
    most_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class _Server(ThreadingHTTPServer):
    daemon_threads = False  # joined on close: no socket outlives the test (filterwarnings=error)
    block_on_close = True


@contextmanager
def serve_loopback(handler: type[BaseHTTPRequestHandler],
                   on_stop: Callable[[], None] | None = None) -> Iterator[str]:
    """Serve `handler` on 127.0.0.1 for the block and yield its base URL (http://127.0.0.1:PORT); on the way out
    call on_stop (so held replies give up), then shut down and join every handler thread."""
    server = _Server(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        if on_stop is not None:
            on_stop()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@contextmanager
def stand_in(answer: Answer) -> Iterator[StandIn]:
    """Serve `answer` on 127.0.0.1 for the duration of the block."""
    state = StandIn()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            headers = dict(self.headers.items())
            state.requests.append({"path": self.path, "headers": headers, "json": body})
            self._answer(*answer(self.path, headers, body))

        def _answer(self, status: int, payload: Any, extra: dict[str, str]) -> None:
            if state.stop.is_set():
                return
            drip = payload if isinstance(payload, Drip) else None
            data = drip.body if drip else payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            sent, counted = 0, False
            try:
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if drip is None:
                    self.wfile.write(data)
                    return
                self.wfile.flush()
                with state.lock:
                    state.in_flight += 1
                    state.most_in_flight = max(state.most_in_flight, state.in_flight)
                counted = True
                while sent < len(data) and not state.stop.wait(drip.every):
                    self.wfile.write(data[sent:sent + 1])
                    self.wfile.flush()
                    sent += 1
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test)
            finally:
                if drip is not None:
                    with state.lock:
                        state.in_flight -= counted
                        state.dripped.append((sent, len(data)))

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    with serve_loopback(Handler, on_stop=state.stop.set) as url:
        state.url = url
        yield state
