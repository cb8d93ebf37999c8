"""One error hierarchy; each class carries its HTTP status and a stable code."""

from __future__ import annotations


class PackError(Exception):
    """Base of every error the pack raises on purpose."""

    status = 500
    code = "internal_error"

    def __init__(self, message: str, errors: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.errors = errors or [message]


class BadRequestError(PackError):
    status = 400
    code = "bad_request"


class UnauthorizedError(PackError):
    status = 401
    code = "unauthorized"


class CsrfError(PackError):
    """A /ui action without the page's CSRF token: another site may have sent it."""

    status = 403
    code = "csrf_token_invalid"


class ForbiddenOriginError(PackError):
    """A browser request from a page this server does not trust (cross-site write, CSRF)."""

    status = 403
    code = "origin_not_allowed"


class NotFoundError(PackError):
    status = 404
    code = "not_found"


class UnknownNodeError(NotFoundError):
    code = "unknown_node"


class ConflictError(PackError):
    status = 409
    code = "version_conflict"


class LeaseLostError(ConflictError):
    """A request stalled past its session lease and another request took the session: its commit is refused."""

    code = "lease_lost"


class IdTakenError(ConflictError):
    """An imported row names an id that another tenant's row holds (ids are the store's primary key)."""

    code = "id_taken"


class PayloadTooLargeError(PackError):
    status = 413
    code = "payload_too_large"


class UnsupportedMediaError(PackError):
    status = 415
    code = "unsupported_media_type"


class MisdirectedHostError(PackError):
    """A Host header this server does not answer for (DNS rebinding)."""

    status = 421
    code = "host_not_allowed"


class ValidationError(PackError):
    status = 422
    code = "validation_error"


class DuplicateKeyError(ValidationError):
    """A JSON object names one key twice; which one counts is parser-dependent, so neither does."""

    code = "duplicate_key"


class TooMuchWorkError(ValidationError):
    """A request asks for more work (messages, characters to compact) than the server does in one call."""

    code = "too_much_work"


class ConfigurationError(PackError):
    """A setting (an ACN_* variable) the server cannot start with."""

    status = 500
    code = "invalid_configuration"


class ProviderError(PackError):
    status = 502
    code = "provider_error"


class StoreUnavailableError(PackError):
    status = 503
    code = "store_unavailable"


class CoordinationUnavailableError(PackError):
    """Redis (ACN_REDIS_URL) cannot be reached: no session lease, so no write (503 with Retry-After)."""

    status = 503
    code = "coordination_unavailable"


class SessionBusyError(PackError):
    """Another request held the session's lease for longer than ACN_REDIS_LOCK_WAIT_SECONDS."""

    status = 503
    code = "session_busy"


class BusyError(PackError):
    """Every slot for CPU-heavy work is taken and none came free in time; the server sends Retry-After."""

    status = 503
    code = "busy"


class ProviderTimeoutError(PackError):
    status = 504
    code = "provider_timeout"


class LlmNotAllowedError(PackError):
    """A request asked for an LLM endpoint or override the operator does not allow."""

    status = 403
    code = "llm_url_not_allowed"


class LlmOverrideNotAllowedError(LlmNotAllowedError):
    code = "llm_override_not_allowed"


class LlmBusyError(PackError):
    """Every outbound LLM slot is taken (ACN_LLM_MAX_CONCURRENT); the server answers 503 with Retry-After."""

    status = 503
    code = "llm_busy"
