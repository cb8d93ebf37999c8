"""Where outbound LLM calls may go: URL parsing, the operator's allow-list, address checks, and the call slots.

The operator's endpoint (ACN_LLM_BASE_URL) is trusted and is the only one that ever gets ACN_LLM_API_KEY. A URL a
request names is refused unless it matches an ACN_LLM_ALLOWED_URLS entry; it then gets only the key the request
itself carries, and it is resolved, every address checked, and the connection pinned to a checked address.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit

from acn.common.errors import ConfigurationError, LlmBusyError, LlmNotAllowedError

# A request-chosen endpoint never waits longer than this per attempt, whatever the request or the operator says.
MAX_REQUEST_TIMEOUT_SECONDS = 60.0
# ... and is retried at most this often (each retry is another timeout of a held slot).
MAX_REQUEST_RETRIES = 1
DEFAULT_PORTS = {"http": 80, "https": 443}
# Cloud metadata services: never reachable, not even when an allow-list entry names them.
METADATA_ADDRESSES = frozenset(ipaddress.ip_address(a) for a in (
    "169.254.169.254", "169.254.170.2", "100.100.100.200", "fd00:ec2::254"))
# Hosts that look numeric but are not a canonical dotted quad (127.1, 0x7f000001, 2130706433, 0177.0.0.1):
# resolvers read them as addresses, so they could pass a name comparison and still reach loopback.
_NUMERIC_LABEL = re.compile(r"^(0x[0-9a-f]*|[0-9]+)$", re.IGNORECASE)
_HOST_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$")
_UNSAFE_CHARS = re.compile(r"[\x00-\x20\x7f\\%]")


@dataclass(frozen=True)
class Target:
    """A parsed http(s) base URL: what the allow-list compares, part by part."""

    scheme: str
    host: str  # lower case; an IPv6 literal without brackets
    port: int
    path: str  # no trailing slash; "" for the root

    @property
    def is_ip_literal(self) -> bool:
        return _ip_or_none(self.host) is not None

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == DEFAULT_PORTS[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path}"

    def within(self, entry: Target) -> bool:
        """True when this URL is the entry itself or below its path (on a segment boundary)."""
        if (self.scheme, self.host, self.port) != (entry.scheme, entry.host, entry.port):
            return False
        return self.path == entry.path or self.path.startswith(entry.path + "/")


def parse_url(url: str) -> Target:
    """Parse an http(s) base URL strictly; raise LlmNotAllowedError naming the problem (never echoing secrets)."""
    if _UNSAFE_CHARS.search(url):
        raise LlmNotAllowedError("LLM URL refused: whitespace, control characters, backslashes and %-escapes "
                                 "are not allowed")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise LlmNotAllowedError("LLM URL refused: it does not parse (bad host or port)") from None
    if parts.scheme not in DEFAULT_PORTS:
        raise LlmNotAllowedError("LLM URL refused: only http and https are allowed")
    if "@" in parts.netloc or parts.username is not None or parts.password is not None:
        raise LlmNotAllowedError("LLM URL refused: credentials in the URL (user:password@) are not allowed")
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise LlmNotAllowedError("LLM URL refused: a base URL has no query or fragment")
    host = (parts.hostname or "").lower()
    if not host:
        raise LlmNotAllowedError("LLM URL refused: no host")
    if _ip_or_none(host) is None:
        if all(_NUMERIC_LABEL.match(label) for label in host.rstrip(".").split(".")):
            raise LlmNotAllowedError("LLM URL refused: a numeric host must be a canonical IP address")
        if not _HOST_NAME.match(host):
            raise LlmNotAllowedError("LLM URL refused: the host is not a valid DNS name or IP address")
    segments = parts.path.split("/")
    if any(segment in (".", "..") for segment in segments):
        raise LlmNotAllowedError("LLM URL refused: '.' and '..' path segments are not allowed")
    return Target(parts.scheme, host, port or DEFAULT_PORTS[parts.scheme], parts.path.rstrip("/"))


def parse_allow_list(text: str) -> list[Target]:
    """Parse ACN_LLM_ALLOWED_URLS (comma-separated base URLs); a malformed entry is a configuration error."""
    entries: list[Target] = []
    for raw in (item.strip() for item in text.split(",")):
        if not raw:
            continue
        try:
            entries.append(parse_url(raw))
        except LlmNotAllowedError as error:
            raise ConfigurationError(f"ACN_LLM_ALLOWED_URLS: entry {raw!r}: {error.message}") from None
    return entries


def allowed_entry(target: Target, entries: list[Target]) -> Target | None:
    """Return the allow-list entry the target falls under, if any."""
    return next((entry for entry in entries if target.within(entry)), None)


def _ip_or_none(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """Return the IPv4 address an IPv6 form carries (mapped, 6to4, Teredo, NAT64), if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in ipaddress.ip_network("64:ff9b::/96") or ip in ipaddress.ip_network("::/96"):
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def address_problem(address: str, *, private_ok: bool) -> str | None:
    """Return why an address may not be connected to, or None.

    private_ok: the operator's allow-list entry names this very address (its consent to a private host).
    """
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    candidates = [ip]
    if isinstance(ip, ipaddress.IPv6Address) and (inner := _embedded_v4(ip)) is not None:
        candidates.append(inner)
    for candidate in candidates:
        if candidate in METADATA_ADDRESSES:
            return "a cloud metadata address"
        if candidate.is_unspecified or candidate.is_multicast or candidate.is_reserved:
            return "an unspecified, multicast or reserved address"
        if not private_ok and not candidate.is_global:
            return "a loopback, private, link-local or otherwise non-public address"
    return None


def resolve_checked(target: Target, *, private_ok: bool) -> list[str]:
    """Resolve the target's host and return its addresses; refuse if ANY of them fails the address check.

    Checking every address (not only the first) means a name that resolves to one public and one private
    address is refused, whichever the connection would have picked.
    """
    if target.is_ip_literal:
        addresses = [target.host]
    else:
        try:
            infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError):
            raise LlmNotAllowedError("LLM URL refused: its host does not resolve") from None
        addresses = list(dict.fromkeys(str(info[4][0]) for info in infos))
    if not addresses:
        raise LlmNotAllowedError("LLM URL refused: its host does not resolve")
    for address in addresses:
        problem = address_problem(address, private_ok=private_ok)
        if problem:
            raise LlmNotAllowedError(f"LLM URL refused: its host resolves to {problem}")
    return addresses


class LlmGate:
    """At most `size` outbound LLM calls at once, so they cannot hold every request thread."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._slots = threading.BoundedSemaphore(size)

    @contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one slot for the block; raise LlmBusyError (503 + Retry-After) at once when none is free."""
        # No waiting: a queue of requests each holding a thread would pin the threads all the same.
        if not self._slots.acquire(blocking=False):
            raise LlmBusyError(f"all {self.size} outbound LLM slots are busy (ACN_LLM_MAX_CONCURRENT); retry later")
        try:
            yield
        finally:
            self._slots.release()
