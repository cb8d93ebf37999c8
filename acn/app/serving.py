"""How `python server.py` serves: waitress's settings against slow clients, unread answers and proxies.

waitress reads every request on its event loop and buffers it whole (head and body) before a request thread
sees it, and buffers each answer (in memory up to 1 MB, then in a temporary file) so the thread is free once the
answer is written into that buffer. What it needs from us:
- `connection_limit`: its default of 100 let 100 half-sent request heads take every connection;
- poll() instead of select(): select() cannot watch a socket numbered above 1023, so more connections need it;
- `channel_timeout`: a connection with nothing sent or received for that long is closed, the answer a client
  never reads with it;
- no clearing of proxy headers: waitress believes X-Forwarded-* from one exact address at most, and by default
  deletes them from everyone else, before the app's TrustedProxyFix (ACN_TRUSTED_PROXIES, networks) could
  read them. TrustedProxyFix removes them itself from peers it does not trust (acn/app/proxies.py).
"""

from __future__ import annotations

import logging
import resource
from typing import Any

from acn.common.settings import Settings

log = logging.getLogger("acn.server")
# Sockets the process needs besides its connections: the store's files and threads, the listening socket, logs.
SPARE_FILES = 256


def waitress_options(settings: Settings, body_limit: int) -> dict[str, Any]:
    """Return create_server's keyword arguments for these settings."""
    return {
        "threads": settings.threads,
        "ident": "agent-context-nodes",
        "max_request_body_size": body_limit,
        "connection_limit": settings.connection_limit,
        "channel_timeout": settings.channel_timeout_seconds,
        "cleanup_interval": min(30, settings.channel_timeout_seconds),
        "asyncore_use_poll": True,
        "clear_untrusted_proxy_headers": False,
    }


def raise_open_files(connections: int) -> int:
    """Raise the soft open-files limit towards `connections` plus spares (up to the hard limit); return it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + SPARE_FILES
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    if wanted > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        soft = wanted
    if soft < connections + SPARE_FILES:
        log.warning("open-files limit %s is below ACN_CONNECTION_LIMIT %s plus %s spare: raise `ulimit -n`",
                    soft, connections, SPARE_FILES)
    return soft
