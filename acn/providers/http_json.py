"""POST a JSON body to an operator-configured endpoint (embeddings, rerank) and return the parsed JSON answer.

The URL and key come from settings only, never from a request. Redirects are never followed (a redirect could
carry the key elsewhere); the whole call, body included, ends within the timeout; the answer is capped in size,
depth and numbers (acn/providers/bounded.py); an error body goes to the log, truncated, and never into an error
message.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import requests
from urllib3.exceptions import HTTPError, ReadTimeoutError

from acn.common.errors import ConfigurationError, LlmNotAllowedError, ProviderError, ProviderTimeoutError
from acn.providers.bounded import Backoff, CallPool, decode_json, read_body
from acn.providers.llm_guard import parse_url

log = logging.getLogger("acn.providers")
MAX_BODY_BYTES = 32_000_000  # 64 texts × 3,072 dims as JSON floats is ~4 MB; a rerank answer is small
LOGGED_BODY_CHARS = 200


class JsonEndpoint:
    """One configured endpoint: `post(payload)` returns its JSON answer or raises ProviderError/ProviderTimeoutError.

    The call, connection and whole body, ends within timeout_seconds (acn/providers/bounded.py) and runs on the
    endpoint's own threads (at most max_concurrent at once); after a failure the endpoint is not asked again for
    backoff_seconds.
    """

    def __init__(self, url: str, *, api_key: str = "", timeout_seconds: float = 10.0, what: str = "endpoint",
                 setting: str = "", max_concurrent: int = 4, backoff_seconds: float = 0.0) -> None:
        try:
            self.url = parse_url(url).url
        except LlmNotAllowedError as error:
            raise ConfigurationError(f"{setting or what}: {error.message}") from None
        self.what = what
        self.timeout_seconds = float(timeout_seconds)
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"
        self._pool = CallPool(max_concurrent, "acn-provider")
        self.backoff = Backoff(backoff_seconds)

    def close(self) -> None:
        """Close pooled connections and the call threads."""
        self._pool.close()
        self._session.close()

    def post(self, payload: dict[str, Any], timeout_seconds: float | None = None) -> Any:
        """POST payload as JSON; return the parsed answer of a 2xx. timeout_seconds may shorten the call (a
        request's own deadline), never lengthen it."""
        timeout = min(self.timeout_seconds, timeout_seconds) if timeout_seconds is not None else self.timeout_seconds
        deadline = time.monotonic() + timeout
        return self.backoff.guarded(
            lambda: self._pool.run(lambda: self._post_once(payload, deadline, timeout), deadline, self.what),
            self.what)

    def _post_once(self, payload: dict[str, Any], deadline: float, timeout: float) -> Any:
        try:
            with self._session.post(self.url, json=payload, timeout=timeout, stream=True,
                                    allow_redirects=False) as response:
                raw = read_body(response, deadline, self.what, MAX_BODY_BYTES)
                status = response.status_code
        except (requests.Timeout, ReadTimeoutError, TimeoutError) as error:  # read1 raises urllib3's own
            raise ProviderTimeoutError(f"{self.what} timed out after {timeout:.1f}s") from error
        except requests.ConnectionError as error:
            if error.args and isinstance(error.args[0], ReadTimeoutError):
                raise ProviderTimeoutError(f"{self.what} timed out after {timeout:.1f}s") from error
            raise ProviderError(f"{self.what}: connection error ({type(error).__name__})") from error
        except (requests.RequestException, HTTPError, OSError) as error:
            raise ProviderError(f"{self.what}: request failed ({type(error).__name__})") from error
        if not 200 <= status < 300:
            log.warning("%s error", self.what, extra={"status": status,
                                                      "body": raw[:LOGGED_BODY_CHARS].decode("utf-8", "replace")})
            if 300 <= status < 400:
                raise ProviderError(f"{self.what} returned HTTP {status} (a redirect; redirects are not followed)")
            raise ProviderError(f"{self.what} returned HTTP {status}")
        return decode_json(raw, self.what)
