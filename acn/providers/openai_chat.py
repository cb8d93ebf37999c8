"""A small client for any OpenAI-compatible chat-completions endpoint that returns JSON objects."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any

import requests
from requests.adapters import HTTPAdapter
from urllib3.exceptions import HTTPError, ReadTimeoutError

from acn.common.errors import (
    LlmNotAllowedError,
    LlmOverrideNotAllowedError,
    ProviderError,
    ProviderTimeoutError,
    ValidationError,
)
from acn.common.settings import Settings
from acn.providers.bounded import Backoff, CallPool, Malformed, decode_json, loads, read_body
from acn.providers.llm_guard import (
    MAX_REQUEST_RETRIES,
    MAX_REQUEST_TIMEOUT_SECONDS,
    Target,
    allowed_entry,
    parse_allow_list,
    parse_url,
    resolve_checked,
)

log = logging.getLogger("acn.llm")
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
BACKOFF_SECONDS = 0.2
MAX_BODY_BYTES = 4_000_000
# What the server's own configuration may be adjusted by (never the URL or the key: see request_client).
OVERRIDE_FIELDS = ("model", "timeout_seconds", "retries")
# What a request's `llm` object may carry.
REQUEST_OVERRIDE_FIELDS = ("base_url", "model", "api_key", "timeout_seconds")
# How much of an upstream error body the log keeps (the caller never sees any of it).
LOGGED_BODY_CHARS = 200
# Threads for LLM calls, shared by every client (a request-chosen endpoint gets a client per request). More than
# ACN_LLM_MAX_CONCURRENT's default: the gate bounds the callers, these only keep a stuck call off the request thread.
LLM_CALLS = CallPool(16, "acn-llm")
# A surrogate in the text itself (the endpoint's JSON body escaped it) or an escape of one in the reply's JSON.
_SURROGATE = re.compile(r"[\ud800-\udfff]|\\u[dD][89a-fA-F]")
_FENCE = re.compile(r"^\s*```(?:json|JSON)?\s*\n?(.*?)\n?\s*```\s*$", re.DOTALL)


class _Retryable(Exception):
    """Internal: an attempt failed in a way worth retrying (connection error, 5xx, 429)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class _PinnedTLSAdapter(HTTPAdapter):
    """Connect to a checked IP address while TLS still sends and verifies the host name (SNI, certificate)."""

    def __init__(self, hostname: str) -> None:
        self._hostname = hostname
        super().__init__(max_retries=0)

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: Any) -> None:
        pool_kwargs.update(server_hostname=self._hostname, assert_hostname=self._hostname)
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)


class ChatClient:
    """Call POST {base_url}/chat/completions and return the reply content parsed as a JSON object.

    pinned: (target, address) for a request-chosen endpoint: every connection goes to that already-checked
    address, never to a fresh DNS answer (DNS rebinding between check and connect cannot move it), with the
    target's name kept in Host and TLS; proxies from the environment are ignored for the same reason.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str = "",
        timeout_seconds: float = 20.0,
        retries: int = 1,
        pinned: tuple[Target, str] | None = None,
        backoff_seconds: float = 0.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.backoff_seconds = backoff_seconds
        self.model = model
        self.timeout_seconds = float(timeout_seconds)
        self.retries = max(0, int(retries))
        # Creating a Session opens no connection; it only holds the pool for keep-alive reuse.
        self._session = requests.Session()
        self._url = f"{self.base_url}/chat/completions"
        if pinned is not None:
            target, address = pinned
            host = f"[{address}]" if ":" in address else address
            self._url = f"{target.scheme}://{host}:{target.port}{target.path}/chat/completions"
            self._session.trust_env = False
            self._session.headers["Host"] = target.netloc
            if target.scheme == "https":
                self._session.mount("https://", _PinnedTLSAdapter(target.host))
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    @classmethod
    def from_settings(
        cls, settings: Settings, overrides: Mapping[str, Any] | None = None
    ) -> ChatClient | None:
        """Build a client for the operator's endpoint from llm_* settings; None when no base URL is configured.

        Overrides may lower the timeout and retries (never raise them) and change the model.
        """
        values: dict[str, Any] = {
            "base_url": settings.llm_base_url,
            "model": settings.llm_model,
            "api_key": settings.llm_api_key,
            "timeout_seconds": settings.llm_timeout_seconds,
            "retries": settings.llm_retries,
            "backoff_seconds": settings.provider_backoff_seconds,
        }
        unknown = sorted(set(overrides or {}) - set(OVERRIDE_FIELDS))
        if unknown:
            raise ValidationError(f"unknown LLM override(s): {', '.join(unknown)}")
        given = {key: value for key, value in (overrides or {}).items() if value is not None}
        values["model"] = given.get("model", values["model"])
        values["timeout_seconds"] = min(float(given.get("timeout_seconds", values["timeout_seconds"])),
                                        settings.llm_timeout_seconds)
        values["retries"] = min(int(given.get("retries", values["retries"])), settings.llm_retries)
        if not values["base_url"]:
            return None
        return cls(**values)

    @classmethod
    def for_request(cls, settings: Settings, overrides: Mapping[str, Any]) -> ChatClient | None:
        """Build the client a request's `llm` overrides ask for, or refuse them (see request_endpoint)."""
        endpoint = request_endpoint(settings, overrides)
        return cls(**endpoint) if endpoint is not None else None

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
        body = backoff_for(self._url, self.backoff_seconds).guarded(lambda: self._post_with_retries(payload),
                                                                   "LLM endpoint")
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
        deadline = time.monotonic() + timeout
        # On the LLM call threads, waited for until the deadline at most: a server that drips even its headers
        # keeps one of those threads, not the request past its budget (acn/providers/bounded.py).
        return LLM_CALLS.run(lambda: self._attempt(payload, deadline, timeout), deadline, "LLM endpoint")

    def _attempt(self, payload: dict[str, Any], deadline: float, timeout: float) -> Any:
        try:
            # Never follow a redirect: it could lead a checked request (and its key) anywhere.
            with self._session.post(self._url, json=payload, timeout=timeout, stream=True,
                                    allow_redirects=False) as response:
                raw = read_body(response, deadline, "LLM", MAX_BODY_BYTES)
                status = response.status_code
        except (requests.Timeout, ReadTimeoutError, TimeoutError) as error:  # read1 raises urllib3's own
            raise ProviderTimeoutError(f"LLM endpoint timed out after {timeout:.1f}s") from error
        except requests.ConnectionError as error:
            # requests reports a read timeout while streaming the body as a ConnectionError.
            if error.args and isinstance(error.args[0], ReadTimeoutError):
                raise ProviderTimeoutError(f"LLM endpoint timed out after {timeout:.1f}s") from error
            raise _Retryable(f"connection error: {type(error).__name__}") from error
        except (requests.RequestException, HTTPError, OSError) as error:
            raise ProviderError(f"LLM request failed: {type(error).__name__}") from error
        return _decode_body(status, raw)


_BACKOFFS: dict[tuple[str, float], Backoff] = {}
_BACKOFFS_LOCK = threading.Lock()
MAX_BACKOFFS = 1024


def backoff_for(url: str, seconds: float) -> Backoff:
    """Return the back-off of an LLM URL, shared by the clients every request builds for it."""
    with _BACKOFFS_LOCK:
        found = _BACKOFFS.get((url, seconds))
        if found is None:
            if len(_BACKOFFS) >= MAX_BACKOFFS:  # request-chosen URLs: a bound, not a history
                _BACKOFFS.clear()
            found = _BACKOFFS[(url, seconds)] = Backoff(seconds)
        return found


def request_endpoint(settings: Settings, overrides: Mapping[str, Any]) -> dict[str, Any] | None:
    """Return the ChatClient arguments for a request's `llm` overrides, or raise LlmNotAllowedError (403).

    - No base_url (or the operator's own): the operator's endpoint. The operator's key goes there and nowhere
      else; the request may bring its own key, and may pick another model only with its own key (the
      operator's key pays for the operator's model). The timeout may only be lowered.
    - Another base_url: refused unless ACN_LLM_ALLOWED_URLS lists it (scheme, host, port and path prefix, as
      parsed). It gets only the request's own key, a timeout of at most min(operator's, 60 s) and at most one
      retry; its host is resolved, every address checked (loopback, private, link-local, metadata, reserved
      refused unless the allow-list entry names that IP address itself) and the connection pinned to it.
    None: no endpoint at all (nothing configured and no URL given).
    """
    given = {key: value for key, value in overrides.items() if value is not None}
    unknown = sorted(set(given) - set(REQUEST_OVERRIDE_FIELDS))
    if unknown:
        raise ValidationError(f"unknown LLM override(s): {', '.join(unknown)}")
    operator_timeout = settings.llm_timeout_seconds
    timeout = min(float(given.get("timeout_seconds", operator_timeout)), operator_timeout)
    base_url = given.get("base_url")
    if base_url is None or _same_url(base_url, settings.llm_base_url):
        if not settings.llm_base_url:
            return None
        if given.get("model", settings.llm_model) != settings.llm_model and not given.get("api_key"):
            raise LlmOverrideNotAllowedError("llm.model may differ from the server's model only with the "
                                             "request's own llm.api_key")
        return {"base_url": settings.llm_base_url, "model": given.get("model", settings.llm_model),
                "api_key": given.get("api_key") or settings.llm_api_key, "timeout_seconds": timeout,
                "retries": settings.llm_retries, "backoff_seconds": settings.provider_backoff_seconds}
    entries = parse_allow_list(settings.llm_allowed_urls)
    if not entries:
        raise LlmNotAllowedError("request-chosen LLM URLs are off on this server (an operator may allow some "
                                 "with ACN_LLM_ALLOWED_URLS); omit llm.base_url to use the server's endpoint")
    target = parse_url(base_url)
    entry = allowed_entry(target, entries)
    if entry is None:
        raise LlmNotAllowedError("LLM URL refused: it is not in the server's allow-list (ACN_LLM_ALLOWED_URLS)")
    # An entry that names an IP address itself is the operator's consent to that (possibly private) address.
    addresses = resolve_checked(target, private_ok=entry.is_ip_literal)
    return {"base_url": target.url, "model": given.get("model", settings.llm_model),
            "api_key": given.get("api_key", ""), "timeout_seconds": min(timeout, MAX_REQUEST_TIMEOUT_SECONDS),
            "retries": min(settings.llm_retries, MAX_REQUEST_RETRIES), "pinned": (target, addresses[0]),
            "backoff_seconds": settings.provider_backoff_seconds}


def _same_url(url: str, configured: str) -> bool:
    """True when url is the operator's configured endpoint (compared parsed, else as written)."""
    if not configured:
        return False
    try:
        return parse_url(url) == parse_url(configured)
    except LlmNotAllowedError:
        return url.rstrip("/") == configured.rstrip("/")


def _decode_body(status: int, raw: bytes) -> Any:
    """Turn a status and raw body into parsed JSON, raising typed errors for failures.

    An error's body goes to the log (truncated; the log formatter masks personal data), never into the
    error message: messages reach the caller (fallback_reason), and reflecting what an arbitrary URL answered
    would make the server a reading proxy.
    """
    if not 200 <= status < 300:
        log.warning("LLM endpoint error", extra={"status": status,
                                                 "body": raw[:LOGGED_BODY_CHARS].decode("utf-8", "replace")})
    if status in RETRY_STATUSES:
        raise _Retryable(f"HTTP {status}")
    if 300 <= status < 400:
        raise ProviderError(f"LLM endpoint returned HTTP {status} (a redirect; redirects are not followed)")
    if not 200 <= status < 300:
        raise ProviderError(f"LLM endpoint returned HTTP {status}")
    return decode_json(raw, "LLM endpoint")


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
    """Parse reply text as a JSON object, tolerating a ```json fence around it.

    Refused as a request body is (acn/app/json_body.py): a key twice in one object (two "goal" keys: json keeps
    the last, which no other reader of the reply need agree with) and an unpaired UTF-16 surrogate (a lone
    "\\ud800" cannot be encoded, so it could be neither hashed nor stored).
    """
    fenced = _FENCE.match(content)
    text = fenced.group(1) if fenced else content
    try:
        value = loads(text, unique_keys=True)
    except Malformed as error:
        raise ProviderError(f"LLM reply content is malformed JSON ({error})") from None
    except ValueError as error:
        raise ProviderError("LLM reply content is not valid JSON") from error
    if not isinstance(value, dict):
        raise ProviderError("LLM reply content is not a JSON object")
    if _SURROGATE.search(text) and not _encodable(value):
        raise ProviderError("LLM reply content holds an unpaired UTF-16 surrogate")
    return value


def _encodable(value: Any) -> bool:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
