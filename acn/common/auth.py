"""API keys: key -> tenant, compared in constant time, never logged."""

from __future__ import annotations

import hmac
import os
import re

from acn.common.errors import ConfigurationError, UnauthorizedError, ValidationError
from acn.common.models import IDENTIFIER_PATTERN

DEFAULT_TENANT = "default"
# A key is a password every request carries: a short one is guessed (a 1-character key fell to the sign-in form
# in 0.03 s). 16 characters of `acn keygen`'s alphabet are ~95 bits.
MIN_KEY_CHARS = 16


def parse_api_keys(value: str) -> dict[str, str]:
    """Return key -> tenant from 'key:tenant,key2:tenant2' or from a file with one pair per line."""
    value = value.strip()
    if not value:
        return {}
    text = _read_file(value) if os.path.isfile(value) else value.replace(",", "\n")
    keys: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, tenant = line.rpartition(":")
        if not sep or not key or not tenant:
            raise ValidationError(f"ACN_API_KEYS entry {number} is not 'key:tenant'")
        _check_tenant(tenant, number)
        if len(key.strip()) < MIN_KEY_CHARS:
            # The key itself is never echoed: the message names the entry and the rule only.
            raise ConfigurationError(f"ACN_API_KEYS entry {number}: a key must be at least {MIN_KEY_CHARS} "
                                     "characters long (`acn keygen` prints a good one)")
        keys[key.strip()] = tenant.strip()
    return keys


def _read_file(path: str) -> str:
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def _check_tenant(tenant: str, number: int) -> None:
    if not re.fullmatch(IDENTIFIER_PATTERN, tenant.strip()):  # not match: "$" passes a trailing newline
        raise ValidationError(f"ACN_API_KEYS entry {number}: tenant is not a valid identifier")


def authenticate(authorization: str | None, keys: dict[str, str]) -> str:
    """Return the tenant of a Bearer key; with no keys configured everyone is the default tenant."""
    if not keys:
        return DEFAULT_TENANT
    scheme, _, presented = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not presented.strip():
        raise UnauthorizedError("missing API key: send 'Authorization: Bearer <key>'")
    presented_bytes = presented.strip().encode()
    tenant = None
    # Compare against every key so the time taken does not depend on which key (if any) matched.
    for key, owner in keys.items():
        if hmac.compare_digest(presented_bytes, key.encode()):
            tenant = owner
    if tenant is None:
        raise UnauthorizedError("invalid API key")
    return tenant
