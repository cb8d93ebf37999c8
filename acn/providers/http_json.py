"""POST a JSON body to an operator-configured endpoint (embeddings, rerank) and return the parsed JSON answer.

The URL and key come from settings only, never from a request. Redirects are never followed (a redirect could
carry the key elsewhere); the whole call, body included, ends within the timeout; the answer is capped in size;
an error body goes to the log, truncated, and never into an error message.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import requests
from urllib3.exceptions import ReadTimeoutError

from acn.common.errors import ConfigurationError, LlmNotAllowedError, ProviderError, ProviderTimeoutError
from acn.providers.llm_guard import parse_url

log = logging.getLogger("acn.providers")
MAX_BODY_BYTES = 32_000_000  # 64 texts × 3,072 dims as JSON floats is ~4 MB; a rerank answer is small
LOGGED_BODY_CHARS = 200


class JsonEndpoint:
    """One configured endpoint: `post(payload)` returns its JSON answer or raises ProviderError/ProviderTimeoutError."""

    def __init__(self, url: str, *, api_key: str = "", timeout_seconds: float = 10.0, what: str = "endpoint",
                 setting: str = "") -> None:
        try:
            self.url = parse_url(url).url
        except LlmNotAllowedError as error:
            raise ConfigurationError(f"{setting or what}: {error.message}") from None
        self.what = what
        self.timeout_seconds = float(timeout_seconds)
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        """Close pooled connections."""
        self._session.close()

    def post(self, payload: dict[str, Any]) -> Any:
        """POST payload as JSON; return the parsed answer of a 2xx."""
        started = time.monotonic()
        deadline = started + self.timeout_seconds
        try:
            with self._session.post(self.url, json=payload, timeout=self.timeout_seconds, stream=True,
                                    allow_redirects=False) as response:
                raw = read_body(response, deadline, self.what)
                status = response.status_code
        except requests.Timeout as error:
            raise ProviderTimeoutError(f"{self.what} timed out after {self.timeout_seconds:.1f}s") from error
        except requests.ConnectionError as error:
            if error.args and isinstance(error.args[0], ReadTimeoutError):
                raise ProviderTimeoutError(f"{self.what} timed out after {self.timeout_seconds:.1f}s") from error
            raise ProviderError(f"{self.what}: connection error ({type(error).__name__})") from error
        except requests.RequestException as error:
            raise ProviderError(f"{self.what}: request failed ({type(error).__name__})") from error
        if not 200 <= status < 300:
            log.warning("%s error", self.what, extra={"status": status,
                                                      "body": raw[:LOGGED_BODY_CHARS].decode("utf-8", "replace")})
            if 300 <= status < 400:
                raise ProviderError(f"{self.what} returned HTTP {status} (a redirect; redirects are not followed)")
            raise ProviderError(f"{self.what} returned HTTP {status}")
        try:
            return json.loads(raw)
        except ValueError as error:
            raise ProviderError(f"{self.what} returned a body that is not JSON") from error


def read_body(response: requests.Response, deadline: float, what: str, limit: int = MAX_BODY_BYTES) -> bytes:
    """Read the body in chunks so a server that trickles bytes cannot outlast the deadline, nor send more than
    `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=65536):
        chunks.append(chunk)
        size += len(chunk)
        if time.monotonic() > deadline:
            raise requests.Timeout("reading the response body took too long")
        if size > limit:
            raise ProviderError(f"{what} answered more than {limit} bytes")
    return b"".join(chunks)
