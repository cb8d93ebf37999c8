"""One tenant holds at most its share of the request threads (ACN_TENANT_THREADS); past it, 429 at once.

Why at once and not after a wait: a request waiting for its tenant's slot would itself hold a request thread,
the very thing the share keeps for the others. A slot is held while the app works on the request (from after
authentication to the request's teardown); sending the answer is the server's, and never holds a thread for long:
every answer fits the server's output buffer (waitress) or the proxy's (nginx), list pages being bounded in bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from acn.common.errors import TenantBusyError


def share_of(threads: int, tenant_threads: int) -> int:
    """Return the threads one tenant may hold: ACN_TENANT_THREADS, or half of ACN_THREADS when it is 0."""
    return tenant_threads if tenant_threads > 0 else max(1, threads // 2)


class TenantShare:
    """Count each tenant's requests in progress; refuse one past `limit` with TenantBusyError."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, tenant: str) -> Callable[[], None]:
        """Take one of the tenant's slots and return its release (a second call does nothing), or raise."""
        with self._lock:
            held = self._held.get(tenant, 0)
            if held >= self.limit:
                raise TenantBusyError(
                    f"this tenant already has {held} requests in progress, its share of the server's request "
                    "threads (ACN_TENANT_THREADS); retry when one has finished")
            self._held[tenant] = held + 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if released.is_set():
                    return
                released.set()
                left = self._held[tenant] - 1
                if left:
                    self._held[tenant] = left
                else:
                    del self._held[tenant]

        return release

    def held(self, tenant: str) -> int:
        """Return how many slots the tenant holds now."""
        with self._lock:
            return self._held.get(tenant, 0)
