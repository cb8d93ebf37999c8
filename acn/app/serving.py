"""How `python server.py` serves: waitress's settings against slow clients, unread answers and proxies.

waitress reads every request on its event loop and buffers it whole (head and body) before a request thread
sees it, and buffers each answer (in memory up to 1 MB, then in a temporary file) so the thread is free once the
answer is written into that buffer. What it needs from us:
- `connection_limit`: its default of 100 let 100 half-sent request heads take every connection;
- poll() instead of select(): select() cannot watch a socket numbered above 1023, so more connections need it;
- `channel_timeout`: a connection with nothing sent or received for that long is closed, the answer a client
  never reads with it. waitress marks such a connection but closes it only once it can write to it, which a
  client that reads nothing never lets it do: the connection and its buffered answer stayed for ever. Our
  connection class (channel_class) closes it at once;
- a cap per client address (AddressCap, ours: waitress has none), so that one address cannot take every
  connection; trusted proxies are exempt, since every client behind one shares its address;
- no clearing of proxy headers: waitress believes X-Forwarded-* from one exact address at most, and by default
  deletes them from everyone else, before the app's TrustedProxyFix (ACN_TRUSTED_PROXIES, networks) could
  read them. TrustedProxyFix removes them itself from peers it does not trust (acn/app/proxies.py).
"""

from __future__ import annotations

import logging
import resource
import socket
import threading
from collections import Counter
from collections.abc import Callable
from typing import Any

from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer

from acn.common.settings import Settings

log = logging.getLogger("acn.server")
# Sockets the process needs besides its connections: the store's files and threads, the listening socket, logs.
SPARE_FILES = 256
# What a connection past its address's cap reads before it is closed: a plain answer, since no request was read.
REFUSAL = (b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 5\r\nContent-Type: text/plain\r\n"
           b"Content-Length: 43\r\nConnection: close\r\n\r\ntoo many connections from this address (429)")


def waitress_options(settings: Settings, body_limit: int, connections: int) -> dict[str, Any]:
    """Return create_server's keyword arguments for these settings, at most `connections` connections."""
    return {
        "threads": settings.threads,
        "ident": "agent-context-nodes",
        "max_request_body_size": body_limit,
        "connection_limit": connections,
        "channel_timeout": settings.channel_timeout_seconds,
        "cleanup_interval": min(30, settings.channel_timeout_seconds),
        "asyncore_use_poll": True,
        "clear_untrusted_proxy_headers": False,
    }


def raise_open_files(connections: int) -> int:
    """Raise the soft open-files limit towards `connections` plus spares (up to the hard limit); return how many
    connections it then allows (past that, accept() would fail on every turn of the event loop)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + SPARE_FILES
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    if soft < connections + SPARE_FILES:
        log.warning("open-files limit %s is below ACN_CONNECTION_LIMIT %s plus %s spare: %s connections at most; "
                    "raise `ulimit -n`", soft, connections, SPARE_FILES, max(10, soft - SPARE_FILES))
        return max(10, soft - SPARE_FILES)
    return connections


class AddressCap:
    """Count open connections per client address; refuse one past `cap` (never for an exempt address)."""

    def __init__(self, cap: int, exempt: Callable[[str], bool]) -> None:
        self.cap = cap
        self.exempt = exempt
        self.open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def admit(self, address: str) -> bool:
        """Count a new connection from `address`; False (and not counted) when the address has its cap."""
        with self._lock:
            if self.open[address] >= self.cap:
                return False
            self.open[address] += 1
            return True

    def release(self, address: str) -> None:
        """Forget one of the address's connections."""
        with self._lock:
            self.open[address] -= 1
            if self.open[address] <= 0:
                del self.open[address]



def channel_class(cap: AddressCap | None) -> type[HTTPChannel]:
    """Return waitress's connection class that counts connections by `cap` (if any) and drops stuck answers."""

    class Channel(HTTPChannel):  # type: ignore[misc]
        counted = ""

        def __init__(self, server: Any, sock: socket.socket, addr: Any, adj: Any, map: Any = None) -> None:
            super().__init__(server, sock, addr, adj, map)
            address = str(addr[0]) if isinstance(addr, tuple) and addr else ""
            if cap is None or not address or cap.exempt(address):
                return
            if cap.admit(address):
                self.counted = address
                return
            try:
                sock.send(REFUSAL)  # non-blocking; a full buffer just loses the courtesy
            except OSError:
                pass
            self.handle_close()

        def readable(self) -> bool:
            # Asked on the event loop, for every connection, at every turn. A connection marked to close (idle past
            # channel_timeout, or a failed send) with output still waiting and no request running is one whose
            # client reads nothing: waitress would close it only once it could write, which is never.
            if self.will_close and self.total_outbufs_len and not self.requests:
                self.handle_close()
                return False
            return bool(super().readable())

        def del_channel(self, map: Any = None) -> None:
            super().del_channel(map)
            if self.counted:
                address, self.counted = self.counted, ""
                if cap is not None:
                    cap.release(address)

    return Channel


def install_channel_class(server_map: dict[int, Any], cap: AddressCap | None) -> None:
    """Make every waitress server in `server_map` (create_server's map) use channel_class(cap)."""
    for dispatcher in list(server_map.values()):
        if isinstance(dispatcher, BaseWSGIServer):
            dispatcher.channel_class = channel_class(cap)
