"""X-Forwarded-* headers believed only from the reverse proxies the operator lists (ACN_TRUSTED_PROXIES).

Anyone can send X-Forwarded-Proto or -Host; believed from everyone, they would let a caller choose the scheme and
host the server writes into its OpenAPI documents and the Host name its DNS-rebinding guard checks.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable
from typing import Any

from werkzeug.middleware.proxy_fix import ProxyFix

from acn.common.errors import ConfigurationError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
# The WSGI names of X-Forwarded-* and Forwarded (RFC 7239).
FORWARDED_PREFIXES = ("HTTP_X_FORWARDED_", "HTTP_FORWARDED")


def parse_trusted_proxies(value: str) -> list[Network]:
    """Return the networks of ACN_TRUSTED_PROXIES; a malformed entry stops start-up with its name."""
    networks = []
    for entry in (part.strip() for part in value.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            raise ConfigurationError(f"ACN_TRUSTED_PROXIES: {entry!r} is not an IP address or network") from None
    return networks


def is_trusted(peer: str, networks: Iterable[Network]) -> bool:
    """True when the connection's peer address lies in one of the networks."""
    try:
        address = ipaddress.ip_address(peer.split("%", 1)[0])
    except ValueError:
        return False
    return any(address in network for network in networks)


class TrustedProxyFix:
    """Apply werkzeug's ProxyFix (one hop) to requests whose peer is a listed proxy; from anyone else remove the
    forwarded headers, so no later code can be misled by them (under waitress and gunicorn alike)."""

    def __init__(self, app: Callable[..., Any], networks: list[Network]) -> None:
        self.app = app
        self.networks = networks
        self.fixed = ProxyFix(app, x_for=1, x_proto=1, x_host=1, x_port=1, x_prefix=1)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if self.networks and is_trusted(environ.get("REMOTE_ADDR", ""), self.networks):
            return self.fixed(environ, start_response)
        for name in [name for name in environ if name.startswith(FORWARDED_PREFIXES)]:
            del environ[name]
        return self.app(environ, start_response)
