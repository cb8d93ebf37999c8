"""A small client for any OpenAI-compatible chat-completions endpoint that returns JSON objects."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping
from typing import Any

import requests
from urllib3.exceptions import ReadTimeoutError

from common.errors import ProviderError, ProviderTimeoutError, ValidationError
from common.settings import Settings

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_SECONDS = 0.2
MAX_BODY_BYTES = 4_000_000
OVERRIDE_FIELDS = ("base_url", "model", "api_key", "timeout_seconds", "retries")
_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


class _Retryable(Exception):
    """Internal: an attempt failed in a way worth retrying (connection error, 5xx, 429)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ChatClient:
    """Call POST {base_url}/chat/completions and return the reply content parsed as a JSON object."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout_seconds: float = 20.0,
        retries: int = 1,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_seconds = float(timeout_seconds)
        self.retries = max(0, int(retries))
        # Creating a Session opens no connection; it only holds the pool for keep-alive reuse.
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    @classmethod
    def from_settings(
        cls, settings: Settings, overrides: Mapping[str, Any] | None = None
    ) -> ChatClient | None:
        """Build a client from llm_* settings plus overrides; None when no base URL is configured."""
        values: dict[str, Any] = {
            "base_url": settings.llm_base_url,
            "model": settings.llm_model,
            "api_key": settings.llm_api_key,
            "timeout_seconds": settings.llm_timeout_seconds,
            "retries": settings.llm_retries,
        }
        unknown = sorted(set(overrides or {}) - set(OVERRIDE_FIELDS))
        if unknown:
            raise ValidationError(f"unknown LLM override(s): {', '.join(unknown)}")
        values.update({key: value for key, value in (overrides or {}).items() if value is not None})
        if not values["base_url"]:
            return None
        return cls(**values)

    def close(self) -> None:
        """Close pooled connections."""
        self._session.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def complete_json(self, system: str, user: str) -> dict[str, Any]:
        """Send one system+user exchange at temperature 0 and return the reply parsed as a JSON object.

        Raises:
            ProviderTimeoutError: the endpoint did not answer within the time budget.
            ProviderError: connection failure, non-2xx status, or a reply that is not a JSON object.
        """
        payload = {
            "model": self.model,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "temperature": 0,
            "response_format": {"type": "json_object"},
        }
        body = self._post_with_retries(payload)
        return parse_reply_content(extract_content(body))

    def _post_with_retries(self, payload: dict[str, Any]) -> Any:
        """POST the payload, retrying connection errors and 5xx/429 within the overall deadline."""
        # The whole call, retries included, must end within (retries + 1) x timeout.
        deadline = time.monotonic() + self.timeout_seconds * (self.retries + 1)
        last_error = "no attempt made"
        for attempt in range(self.retries + 1):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            try:
                return self._post_once(payload, min(self.timeout_seconds, remaining))
            except _Retryable as error:
                last_error = error.message
            pause = min(BACKOFF_SECONDS * (2**attempt), deadline - time.monotonic())
            if attempt < self.retries and pause > 0:
                time.sleep(pause)
        raise ProviderError(f"LLM endpoint failed after {self.retries + 1} attempt(s): {last_error}")

    def _post_once(self, payload: dict[str, Any], timeout: float) -> Any:
        """Make one attempt; classify its failure as retryable, timeout or provider error."""
        url = f"{self.base_url}/chat/completions"
        started = time.monotonic()
        try:
            with self._session.post(url, json=payload, timeout=timeout, stream=True) as response:
                raw = _read_body(response, started + timeout)
                status = response.status_code
        except requests.Timeout as error:
            raise ProviderTimeoutError(f"LLM endpoint timed out after {timeout:.1f}s") from error
        except requests.ConnectionError as error:
            # requests reports a read timeout while streaming the body as a ConnectionError.
            if error.args and isinstance(error.args[0], ReadTimeoutError):
                raise ProviderTimeoutError(f"LLM endpoint timed out after {timeout:.1f}s") from error
            raise _Retryable(f"connection error: {type(error).__name__}") from error
        except requests.RequestException as error:
            raise ProviderError(f"LLM request failed: {type(error).__name__}") from error
        return _decode_body(status, raw)


def _read_body(response: requests.Response, deadline: float) -> bytes:
    """Read the body in chunks so a server that trickles bytes cannot outlast the deadline."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_content(chunk_size=65536):
        chunks.append(chunk)
        size += len(chunk)
        if time.monotonic() > deadline:
            raise requests.Timeout("reading the response body took too long")
        if size > MAX_BODY_BYTES:
            raise ProviderError(f"LLM reply larger than {MAX_BODY_BYTES} bytes")
    return b"".join(chunks)


def _decode_body(status: int, raw: bytes) -> Any:
    """Turn a status and raw body into parsed JSON, raising typed errors for failures."""
    if status in RETRY_STATUSES:
        raise _Retryable(f"HTTP {status}")
    if not 200 <= status < 300:
        raise ProviderError(f"LLM endpoint returned HTTP {status}: {raw[:200].decode('utf-8', 'replace')}")
    try:
        return json.loads(raw)
    except ValueError as error:
        raise ProviderError("LLM endpoint returned a body that is not JSON") from error


def extract_content(body: Any) -> str:
    """Return choices[0].message.content of a chat-completions body."""
    try:
        content = body["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as error:
        raise ProviderError("LLM reply has no choices[0].message.content") from error
    if not isinstance(content, str):
        raise ProviderError("LLM reply content is not a string")
    return content


def parse_reply_content(content: str) -> dict[str, Any]:
    """Parse reply text as a JSON object, tolerating a ```json fence around it."""
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content
    try:
        value = json.loads(text)
    except ValueError as error:
        raise ProviderError("LLM reply content is not valid JSON") from error
    if not isinstance(value, dict):
        raise ProviderError("LLM reply content is not a JSON object")
    return value
