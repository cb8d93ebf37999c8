"""Sign-in for /ui: an API key is exchanged for a signed, expiring session cookie that only /ui accepts.

A browser cannot send `Authorization: Bearer`, and a proxy that adds it for every request also adds it to requests
another site makes the browser send. So the inspector has its own credential:

- the cookie (`acn_ui_session`, HttpOnly, SameSite=Strict, Path=/ui, Secure over https) holds
  `v1.<key id>.<expiry>.<nonce>.<mac>`: the key id is HMAC(secret, key) — never the key — and the tenant is looked
  up from it, so a token dies with its key (removed from ACN_API_KEYS) and cannot name another tenant;
- the secret is HMAC-derived from ACN_UI_SECRET, else from the API keys, so replicas with the same settings accept
  each other's cookies; with neither (no keys: /ui is open anyway) it is random per process;
- every state-changing /ui request carries a CSRF token: HMAC(secret, the credential) in a hidden field or the
  X-CSRF-Token header; the sign-in form has its own, bound to a short-lived SameSite=Strict cookie;
- server.py's before_request calls `UiAuth.tenant` for /ui paths only: the cookie never authenticates /v1.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Request, g

from acn.app.key_guard import KeyGuard
from acn.common.auth import authenticate
from acn.common.errors import CsrfError, UnauthorizedError
from acn.common.settings import Settings

SESSION_COOKIE = "acn_ui_session"
LOGIN_COOKIE = "acn_ui_login"
COOKIE_PATH = "/ui"
LOGIN_PATH = "/ui/login"
LOGIN_FORM_SECONDS = 1800
# Reachable without a credential: the sign-in page and the stylesheet it uses (no stored data in either).
OPEN_UI_PATHS = frozenset({LOGIN_PATH, "/ui/static/inspector.css"})
TOKEN_VERSION = "v1"


class SignInRequired(UnauthorizedError):
    """A browser asked for a /ui page without a credential: it is sent to the sign-in page, not a JSON 401."""


@dataclass(frozen=True)
class Credential:
    """Who a /ui request is: the tenant and what its CSRF token is bound to."""

    tenant: str
    binding: str
    session: bool = False


def covers(path: str) -> bool:
    """Return True for the inspector's paths (and only those: the cookie is scoped to them)."""
    return path == COOKIE_PATH or path.startswith(COOKIE_PATH + "/")


def _mac(secret: bytes, *parts: str) -> bytes:
    return hmac.new(secret, "\x1f".join(parts).encode(), hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def derive_secret(ui_secret: str, keys: dict[str, str]) -> bytes:
    """Return the signing secret: from ACN_UI_SECRET, else from the keys (replicas agree), else random."""
    if ui_secret:
        return _mac(b"acn-ui-secret", "setting", ui_secret)
    if keys:
        return _mac(b"acn-ui-secret", "keys", *sorted(f"{key}:{tenant}" for key, tenant in keys.items()))
    return os.urandom(32)


class UiAuth:
    """Issues and checks /ui session tokens and CSRF tokens for one app."""

    def __init__(self, keys: dict[str, str], secret: bytes, lifetime_seconds: int,
                 guard: KeyGuard | None = None) -> None:
        self.keys = keys
        self.guard = guard
        self.secret = secret
        self.lifetime = lifetime_seconds
        self.tenants = {self.key_id(key): tenant for key, tenant in keys.items()}

    @classmethod
    def from_settings(cls, settings: Settings, keys: dict[str, str], guard: KeyGuard | None = None) -> UiAuth:
        return cls(keys, derive_secret(settings.ui_secret, keys), settings.ui_session_minutes * 60, guard)

    def check_key(self, authorization: str | None, request: Request, where: str) -> str:
        """Return the tenant of a presented key, through the throttle of the client's address when there is one."""
        if self.guard is None:
            return authenticate(authorization, self.keys)
        return self.guard.authenticate(authorization, self.keys, request.remote_addr or "unknown", where)

    @property
    def open(self) -> bool:
        """True when no API keys are configured: /ui needs no sign-in (the loopback default)."""
        return not self.keys

    def key_id(self, key: str) -> str:
        return _b64(_mac(self.secret, "key", key)[:12])

    # -- session tokens ------------------------------------------------------------------------

    def issue(self, key: str, now: float | None = None) -> str:
        """Return a session token for a valid key (the caller has checked it)."""
        expiry = int((time.time() if now is None else now) + self.lifetime)
        payload = f"{TOKEN_VERSION}.{self.key_id(key)}.{expiry}.{_b64(os.urandom(16))}"
        return f"{payload}.{_b64(_mac(self.secret, 'session', payload))}"

    def session(self, token: str, now: float | None = None) -> Credential | None:
        """Return the credential of a valid, unexpired token whose key is still configured; else None."""
        payload, _, mac = token.rpartition(".")
        parts = payload.split(".")
        if len(parts) != 4 or parts[0] != TOKEN_VERSION or not parts[2].isdigit():
            return None
        if not hmac.compare_digest(mac.encode(), _b64(_mac(self.secret, "session", payload)).encode()):
            return None
        current = time.time() if now is None else now
        # A token that outlives this server's own lifetime setting was not issued under it.
        if not current < int(parts[2]) <= current + self.lifetime:
            return None
        tenant = self.tenants.get(parts[1])
        return Credential(tenant, binding=f"session:{parts[3]}", session=True) if tenant else None

    # -- the before_request step -----------------------------------------------------------------

    def tenant(self, request: Request) -> str:
        """Return the tenant of a /ui request: the Authorization header as for the API, or the session cookie.

        Called for /ui paths only. Sets g.ui_credential (the CSRF binding). Without a credential a browser's page
        request raises SignInRequired (a redirect); anything else gets the API's JSON 401.
        """
        if self.open:
            open_credential = Credential(authenticate(None, self.keys), binding="open")
            g.ui_credential = open_credential
            return open_credential.tenant
        if request.path in OPEN_UI_PATHS:
            return ""
        header = request.headers.get("Authorization")
        if header:
            tenant = self.check_key(header, request, "api_key")
            presented = header.partition(" ")[2].strip()
            g.ui_credential = Credential(tenant, binding=f"key:{self.key_id(presented)}")
            return tenant
        credential = self.session(request.cookies.get(SESSION_COOKIE, ""))
        if credential is None:
            if request.method in ("GET", "HEAD") and wants_html(request):
                raise SignInRequired("sign in at /ui/login")
            raise UnauthorizedError("sign in at /ui/login, or send 'Authorization: Bearer <key>'")
        g.ui_credential = credential
        return credential.tenant

    # -- CSRF ----------------------------------------------------------------------------------

    def csrf_token(self, binding: str) -> str:
        return _b64(_mac(self.secret, "csrf", binding)[:18])

    def check_csrf(self, binding: str, presented: str | None) -> None:
        """Refuse (403) a state-changing /ui request whose token is missing or not this credential's."""
        expected = self.csrf_token(binding).encode()
        if not binding or not presented or not hmac.compare_digest(presented.encode(), expected):
            raise CsrfError("missing or invalid CSRF token: reload the inspector page and try again")

    def login_token(self, nonce: str) -> str:
        return self.csrf_token(f"login:{nonce}")


def wants_html(request: Request) -> bool:
    """True for a browser navigation (Accept prefers HTML); API clients and fetches get JSON."""
    return request.accept_mimetypes.best_match(["application/json", "text/html"]) == "text/html"


def same_origin(request: Request) -> bool:
    """False when a browser says the request comes from another origin (an absent Origin is not a browser's)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return True
    parts = urlsplit(origin)
    return origin != "null" and parts.netloc == request.host and parts.scheme == request.scheme


def safe_next(target: str | None) -> str:
    """Return where to go after signing in: an inspector path only, never another site."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return COOKIE_PATH
    parts = urlsplit(target)
    return target if covers(parts.path) and not parts.netloc and not parts.scheme else COOKIE_PATH
