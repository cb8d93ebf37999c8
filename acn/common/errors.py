"""One error hierarchy of the domain: each class carries a stable code and no transport.

What an error means to HTTP (its status, Retry-After) is decided once, at the app edge (acn/app/statuses.py), by
the family a class belongs to: a pipeline, the store or a provider says *what* went wrong, never which status to
send, so a new caller (a CLI, the Dify plugin, a worker) reads the same errors without HTTP in them.
"""

from __future__ import annotations


class PackError(Exception):
    """Base of every error the pack raises on purpose."""

    code = "internal_error"

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or [message]


class BadRequestError(PackError):
    code = "bad_request"


class UnauthorizedError(PackError):
    code = "unauthorized"


class ForbiddenError(PackError):
    """The caller is known but this request is not allowed (a browser page, an LLM endpoint, a missing token)."""

    code = "forbidden"


class CsrfError(ForbiddenError):
    """A /ui action without the page's CSRF token: another site may have sent it."""

    code = "csrf_token_invalid"


class ForbiddenOriginError(ForbiddenError):
    """A browser request from a page this server does not trust (cross-site write, CSRF)."""

    code = "origin_not_allowed"


class NotFoundError(PackError):
    code = "not_found"


class UnknownNodeError(NotFoundError):
    code = "unknown_node"


class ConflictError(PackError):
    code = "version_conflict"


class LeaseLostError(ConflictError):
    """A request stalled past its session lease and another request took the session: its commit is refused."""

    code = "lease_lost"


class PayloadTooLargeError(PackError):
    code = "payload_too_large"


class UnsupportedMediaError(PackError):
    code = "unsupported_media_type"


class MisdirectedHostError(PackError):
    """A Host header this server does not answer for (DNS rebinding)."""

    code = "host_not_allowed"


class ValidationError(PackError):
    code = "validation_error"


class DuplicateKeyError(ValidationError):
    """A JSON object names one key twice; which one counts is parser-dependent, so neither does."""

    code = "duplicate_key"


class TooMuchWorkError(ValidationError):
    """A request asks for more work (messages, characters to compact) than the server does in one call."""

    code = "too_much_work"


class TurnAheadError(ValidationError):
    """A client-given turn number runs ahead of the session: one number would make every later turn, and every
    page that draws the session's turns, as large as it (turn 10^9 after turn 1)."""

    code = "turn_ahead"


class ConfigurationError(PackError):
    """A setting (an ACN_* variable) the server cannot start with."""

    code = "invalid_configuration"


class ProviderError(PackError):
    code = "provider_error"


class RetryLaterError(PackError):
    """Nothing is wrong with the request: something it needs is down or busy now, and the same call may succeed
    in a few seconds (the edge sends Retry-After)."""

    code = "retry_later"


class StoreUnavailableError(RetryLaterError):
    code = "store_unavailable"


class StoreBehindError(RetryLaterError):
    """The store still answers an older session version than the one Redis says was committed (a replica's write
    not yet visible to this one): nothing was written (503 with Retry-After)."""

    code = "store_behind"


class CoordinationUnavailableError(RetryLaterError):
    """Redis (ACN_REDIS_URL) cannot be reached: no session lease, so no write (503 with Retry-After)."""

    code = "coordination_unavailable"


class SessionBusyError(RetryLaterError):
    """Another request held the session's lease for longer than ACN_REDIS_LOCK_WAIT_SECONDS."""

    code = "session_busy"


class BusyError(RetryLaterError):
    """Every slot for CPU-heavy work is taken and none came free in time; the server sends Retry-After."""

    code = "busy"


class TooManyRequestsError(PackError):
    """A client failed too often (wrong API keys, sign-ins): refused until `seconds` pass (429 with Retry-After)."""

    code = "too_many_requests"

    def __init__(self, message: str, errors: list[str] | None = None, *, seconds: int = 1) -> None:
        super().__init__(message, errors)
        self.seconds = seconds


class SignInThrottledError(TooManyRequestsError):
    """Too many failed keys from one client address: its next attempt waits (the wait grows with the failures)."""

    code = "sign_in_throttled"


class TenantBusyError(TooManyRequestsError):
    """The tenant already holds its share of the request threads (ACN_TENANT_THREADS): 429, retry in a second."""

    code = "tenant_busy"


class ProviderTimeoutError(PackError):
    code = "provider_timeout"


class LlmNotAllowedError(ForbiddenError):
    """A request asked for an LLM endpoint or override the operator does not allow."""

    code = "llm_url_not_allowed"


class LlmOverrideNotAllowedError(LlmNotAllowedError):
    code = "llm_override_not_allowed"


class LlmBusyError(RetryLaterError):
    """Every outbound LLM slot is taken (ACN_LLM_MAX_CONCURRENT); the server answers 503 with Retry-After."""

    code = "llm_busy"


class StoreNotConfiguredError(ConfigurationError):
    """A node that reads or writes memories ran without a store: the wiring's fault, not the request's."""

    code = "store_not_configured"
