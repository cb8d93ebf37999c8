"""A real loopback HTTP server speaking OpenAI chat-completions, with scripted replies."""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.stand_in_http import serve_loopback


@dataclass
class Behaviour:
    """One scripted reply: HTTP status, reply content or raw body, and a delay before answering."""

    status: int = 200
    content: str | None = None
    raw_body: bytes | None = None
    delay_seconds: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeLLM:
    """The scripted server's state: queued behaviours and the requests received."""

    base_url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)
    queue: deque[Behaviour] = field(default_factory=deque)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def reply_json(self, content: Any) -> FakeLLM:
        """Queue a reply whose message content is content serialized as JSON."""
        return self._push(Behaviour(content=json.dumps(content, ensure_ascii=False)))

    def reply_text(self, text: str) -> FakeLLM:
        """Queue a reply whose message content is text as-is (e.g. invalid JSON)."""
        return self._push(Behaviour(content=text))

    def reply_raw(self, body: bytes, status: int = 200) -> FakeLLM:
        """Queue a reply with a raw HTTP body (e.g. not a chat-completions object)."""
        return self._push(Behaviour(status=status, raw_body=body))

    def reply_status(self, status: int) -> FakeLLM:
        """Queue an HTTP error reply."""
        return self._push(Behaviour(status=status, raw_body=b'{"error": {"message": "scripted failure"}}'))

    def reply_redirect(self, location: str, status: int = 307) -> FakeLLM:
        """Queue a redirect (307 keeps the POST and its body) to location."""
        return self._push(Behaviour(status=status, raw_body=b"", headers={"Location": location}))

    def reply_slow(self, seconds: float, content: Any | None = None) -> FakeLLM:
        """Queue a reply sent only after sleeping seconds."""
        text = json.dumps(content if content is not None else {}, ensure_ascii=False)
        return self._push(Behaviour(content=text, delay_seconds=seconds))

    def next_behaviour(self) -> Behaviour:
        """Pop the next scripted behaviour; an unscripted call gets HTTP 599 so a test notices."""
        with self.lock:
            return self.queue.popleft() if self.queue else Behaviour(status=599, raw_body=b"unscripted")

    def record(self, path: str, headers: dict[str, str], body: Any) -> None:
        """Remember one received request."""
        with self.lock:
            self.requests.append({"path": path, "headers": headers, "json": body})

    def _push(self, behaviour: Behaviour) -> FakeLLM:
        with self.lock:
            self.queue.append(behaviour)
        return self


def _completion_body(content: str) -> bytes:
    """Wrap content into a chat-completions response body."""
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
    }
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _make_handler(fake: FakeLLM) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            fake.record(self.path, dict(self.headers.items()), body)
            if not self.path.endswith("/chat/completions"):
                self._send(404, b'{"error": "not found"}')
                return
            behaviour = fake.next_behaviour()
            # Waiting on the stop event (not time.sleep) lets teardown end a slow reply at once.
            if behaviour.delay_seconds and fake.stop.wait(behaviour.delay_seconds):
                return
            payload = (
                behaviour.raw_body
                if behaviour.raw_body is not None
                else _completion_body(behaviour.content or "")
            )
            self._send(behaviour.status, payload, behaviour.headers)

        def _send(self, status: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
            try:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (timeout test); nothing to answer

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    return Handler


@pytest.fixture
def fake_llm() -> Iterator[FakeLLM]:
    """Run a scripted chat-completions server on 127.0.0.1 for one test."""
    fake = FakeLLM()
    with serve_loopback(_make_handler(fake), on_stop=fake.stop.set) as url:
        fake.base_url = f"{url}/v1"
        yield fake


@pytest.fixture
def allowed_fake_llm(app: Any, fake_llm: FakeLLM, monkeypatch: pytest.MonkeyPatch) -> FakeLLM:
    """The fake, with the session app's operator allow-list (ACN_LLM_ALLOWED_URLS) naming it for one test.

    Its URL is an IP literal on loopback: the allow-list entry is the operator's consent to that address.
    """
    runtime = app.extensions["acn"]
    monkeypatch.setattr(runtime, "settings",
                        runtime.settings.model_copy(update={"llm_allowed_urls": fake_llm.base_url}))
    return fake_llm
