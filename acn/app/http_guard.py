"""Browser-facing request checks: Host (DNS rebinding), Origin (cross-site writes), JSON-only writes, CORS.

The server runs `guard_request` before authentication on every path, /ui included, so the inspector's
cookie-authenticated pages rely on the same Host and Origin checks as the API.

Why these three:
- A page on another site can make the victim's browser send a "simple" request to any origin without asking
  first: method GET/POST and a body typed text/plain, multipart/form-data or x-www-form-urlencoded (a form,
  `fetch(..., {mode: "no-cors"})`, `navigator.sendBeacon`, a Blob without a type). Any other content type or
  method (application/json, DELETE, an Authorization header) needs a CORS preflight, which is answered only for
  ACN_CORS_ORIGINS. So writes must be declared JSON.
- Browsers send `Origin` on every cross-origin request but simple navigations, and `Sec-Fetch-Site` on all of
  them: a foreign Origin is refused outright; without Origin, a cross-site unsafe request is refused.
- DNS rebinding makes a hostile name resolve to 127.0.0.1: the page is then same-origin with this server and
  Origin checks pass, but its requests carry `Host: <hostile name>`. Checking Host against the names the
  server is meant to be reached by closes that.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from flask import Request, Response

from acn.app.json_body import is_json_mimetype
from acn.common.errors import ConfigurationError, ForbiddenOriginError, MisdirectedHostError, UnsupportedMediaError

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
FORM_MIMETYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data"})
CORS_METHODS = "GET, POST, DELETE, OPTIONS"
# Mcp-Protocol-Version: what a browser-based MCP client (an inspector page) sends to /mcp after initialize.
CORS_HEADERS = "Authorization, Content-Type, X-Request-Id, Mcp-Protocol-Version"
CORS_EXPOSE = "X-Request-Id, Server-Timing"
CORS_MAX_AGE = "600"
_HOST_NAME = re.compile(r"(\.?[a-z0-9_-]+(\.[a-z0-9_-]+)*|\[[0-9a-f:.]+\])(:\d{1,5})?")
_CROSS_SITE = frozenset({"cross-site", "same-site"})


@dataclass(frozen=True)
class HostRule:
    """One allowed host: an exact name (or `.suffix` for a domain and its subdomains), any port when None."""

    name: str
    port: str | None = None

    def matches(self, name: str, port: str | None) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.name.startswith("."):
            return name == self.name[1:] or name.endswith(self.name)
        return name == self.name


@dataclass(frozen=True)
class GuardPolicy:
    """What the server answers for; built once per app by `build_policy`."""

    host_rules: tuple[HostRule, ...] = tuple(HostRule(name) for name in LOOPBACK_NAMES)
    any_host: bool = False
    ip_literals: bool = False
    cors_origins: frozenset[str] = frozenset()
    # Paths whose unsafe requests may be HTML forms (the inspector's sign-in and actions): they still get the
    # Host and Origin checks, and must carry their own CSRF token; everything else must be JSON.
    form_prefixes: tuple[str, ...] = ()


def build_policy(allowed_hosts: str, cors_origins: str, bind_host: str, keys_on: bool,
                 form_prefixes: tuple[str, ...] = ()) -> GuardPolicy:
    """Return the policy from ACN_ALLOWED_HOSTS / ACN_CORS_ORIGINS, the bind address and whether keys are on.

    Unset ACN_ALLOWED_HOSTS means:
    - bound to loopback: the loopback names (any port) — what a local client or Dify on this host sends;
    - bound elsewhere with API keys on: any Host. A rebinding page has no API key (a Bearer header is never
      ambient) and no cookie either (cookies belong to the name the victim signed in at), so it can neither read
      nor write; refusing unknown names would only break reverse proxies and container names;
    - bound elsewhere without keys: the loopback names and IP literals only. Rebinding needs a DNS name the
      attacker controls; an IP-literal Host cannot be rebound, and a caller on the network can reach an open
      server directly anyway. Container or DNS names must then be listed (the compose file does).
    """
    origins = frozenset(_parse_origins(cors_origins))
    base = GuardPolicy(cors_origins=origins, form_prefixes=form_prefixes)
    value = allowed_hosts.strip()
    if value == "*":
        return GuardPolicy(any_host=True, cors_origins=origins, form_prefixes=form_prefixes)
    if value:
        return GuardPolicy(host_rules=tuple(_parse_host_rule(entry) for entry in value.split(",") if entry.strip()),
                           cors_origins=origins, form_prefixes=form_prefixes)
    if is_loopback(bind_host):
        return base
    if keys_on:
        return GuardPolicy(any_host=True, cors_origins=origins, form_prefixes=form_prefixes)
    return GuardPolicy(ip_literals=True, cors_origins=origins, form_prefixes=form_prefixes)


def is_loopback(host: str) -> bool:
    """True when a bind address only listens on this machine."""
    host = host.strip().strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _parse_host_rule(entry: str) -> HostRule:
    entry = entry.strip().lower()
    if not _HOST_NAME.fullmatch(entry):
        raise ConfigurationError(f"ACN_ALLOWED_HOSTS: {entry!r} is not a host name with an optional :port")
    name, port = split_host(entry)
    return HostRule(name, port)


def _parse_origins(value: str) -> list[str]:
    origins = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        origin = normalize_origin(entry)
        if origin is None:
            # "*" or "null" would hand every page (or every sandboxed one) the right to write.
            raise ConfigurationError(f"ACN_CORS_ORIGINS: {entry!r} is not an origin like https://app.example.com")
        origins.append(origin)
    return origins


def normalize_origin(value: str) -> str | None:
    """Return scheme://host[:port] in lower case (default ports dropped), or None if it is not an origin."""
    try:
        parts = urlsplit(value.strip().rstrip("/"))
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or parts.username:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    default = 80 if parts.scheme == "http" else 443
    return f"{parts.scheme}://{host}" + (f":{port}" if port not in (None, default) else "")


def split_host(host: str) -> tuple[str, str | None]:
    """Split a Host header value into (name, port or None); IPv6 literals keep their brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return name + "]", rest[1:] if rest.startswith(":") else None
    name, sep, port = host.rpartition(":")
    return (name, port) if sep and port.isdigit() else (host, None)


# -- the checks -----------------------------------------------------------------------------


def check_host(host: str, policy: GuardPolicy) -> None:
    """Refuse (421 host_not_allowed) a Host header the server does not answer for."""
    if policy.any_host:
        return
    name, port = split_host(host)
    if name and any(rule.matches(name, port) for rule in policy.host_rules):
        return
    if name and policy.ip_literals and _is_ip_literal(name):
        return
    raise MisdirectedHostError(f"this server does not answer for host {host[:100]!r}; see ACN_ALLOWED_HOSTS")


def _is_ip_literal(name: str) -> bool:
    try:
        ipaddress.ip_address(name.strip("[]"))
    except ValueError:
        return False
    return True


def origin_allowed(origin: str, host: str, policy: GuardPolicy) -> bool:
    """True for an origin listed in ACN_CORS_ORIGINS or the server's own (the page came from this host)."""
    normalized = normalize_origin(origin)
    if normalized is None:  # "null" (sandboxed frames, file:), garbage
        return False
    if normalized in policy.cors_origins:
        return True
    # Same origin: compare host and port, not the scheme, since a TLS-terminating proxy speaks http to us.
    parts = urlsplit(normalized)
    name, port = split_host(host)
    origin_name = f"[{parts.hostname}]" if ":" in (parts.hostname or "") else parts.hostname
    origin_port = str(parts.port) if parts.port else None
    return origin_name == name and (origin_port == port or (port is None and origin_port is None))


def check_origin(request: Request, policy: GuardPolicy) -> None:
    """Refuse (403 origin_not_allowed) a request a foreign page made the browser send."""
    origin = request.headers.get("Origin")
    if origin is not None:
        if not origin_allowed(origin, request.host, policy):
            raise ForbiddenOriginError(f"requests from origin {origin[:100]!r} are not allowed; see ACN_CORS_ORIGINS")
        return
    # No Origin (an older browser, or a navigation): Fetch Metadata still says where the request came from.
    if request.method not in SAFE_METHODS and request.headers.get("Sec-Fetch-Site", "").lower() in _CROSS_SITE:
        raise ForbiddenOriginError("cross-site requests may not change anything")


def check_content_type(request: Request, policy: GuardPolicy) -> None:
    """Refuse (415) an unsafe request whose body is not declared JSON.

    POST/PUT/PATCH need application/json even with an empty body: a no-cors fetch or a beacon can send any of
    those without a body or with text/plain, a form or an untyped Blob. A DELETE without a body is allowed: a
    browser never sends a cross-origin DELETE without a preflight, and admin clients send none.
    """
    if request.method in SAFE_METHODS:
        return
    mimetype = (request.mimetype or "").lower()
    if request.method == "DELETE" and not mimetype and not _has_body(request):
        return
    if is_json_mimetype(mimetype):
        return
    if mimetype in FORM_MIMETYPES and policy.form_prefixes and request.path.startswith(policy.form_prefixes):
        return
    raise UnsupportedMediaError(f"content type must be application/json, not {mimetype or 'none'}")


def _has_body(request: Request) -> bool:
    return bool(request.content_length) or "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def guard_request(request: Request, policy: GuardPolicy) -> Response | None:
    """Run every check; return the answer to a CORS preflight, or None to go on to authentication."""
    check_host(request.host, policy)
    check_origin(request, policy)
    if request.method == "OPTIONS" and "Access-Control-Request-Method" in request.headers:
        return preflight_response(request, policy)
    check_content_type(request, policy)
    return None


def preflight_response(request: Request, policy: GuardPolicy) -> Response:
    """Answer a preflight from an allowed origin (check_origin has refused the others)."""
    response = Response(status=204)
    add_cors_headers(response, request, policy)
    response.headers["Access-Control-Allow-Methods"] = CORS_METHODS
    response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
    response.headers["Access-Control-Max-Age"] = CORS_MAX_AGE
    return response


def add_cors_headers(response: Response, request: Request, policy: GuardPolicy) -> None:
    """Let a listed origin read the response. No Allow-Credentials: cookies (the /ui sign-in) stay same-origin."""
    if not policy.cors_origins:
        return
    response.vary.add("Origin")
    origin = request.headers.get("Origin")
    if origin is None:
        return
    normalized = normalize_origin(origin)
    if normalized in policy.cors_origins:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Expose-Headers"] = CORS_EXPOSE
