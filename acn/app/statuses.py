"""The one place a domain error becomes an HTTP status: by the family its class belongs to (acn/common/errors.py).

Flask's way: exceptions say what happened, the edge decides how it is answered. A class not listed here takes
its nearest listed ancestor's status; anything else the pack raises on purpose is a 500 with its own code.
"""

from __future__ import annotations

from acn.common.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    MisdirectedHostError,
    NotFoundError,
    PackError,
    PayloadTooLargeError,
    ProviderError,
    ProviderTimeoutError,
    RetryLaterError,
    TooManyRequestsError,
    UnauthorizedError,
    UnsupportedMediaError,
    ValidationError,
)

STATUS_BY_FAMILY: dict[type[PackError], int] = {
    BadRequestError: 400,
    UnauthorizedError: 401,
    ForbiddenError: 403,
    NotFoundError: 404,
    ConflictError: 409,
    PayloadTooLargeError: 413,
    UnsupportedMediaError: 415,
    MisdirectedHostError: 421,
    ValidationError: 422,
    TooManyRequestsError: 429,
    ProviderError: 502,
    RetryLaterError: 503,
    ProviderTimeoutError: 504,
}
# How long a client is told to wait before it sends a RetryLaterError's request again.
RETRY_AFTER_SECONDS = 5


def http_status(error: PackError) -> int:
    """Return the status the edge answers `error` with: its nearest family's, else 500."""
    for cls in type(error).__mro__:
        if cls in STATUS_BY_FAMILY:
            return STATUS_BY_FAMILY[cls]
    return 500


def retry_after(error: PackError) -> int | None:
    """Return the Retry-After seconds for an error a retry can fix, else None."""
    if isinstance(error, TooManyRequestsError):
        return error.seconds
    return RETRY_AFTER_SECONDS if isinstance(error, RetryLaterError) else None
