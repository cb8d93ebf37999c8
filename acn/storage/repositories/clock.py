"""Per-session time and per-agent locks of a memory repository: what its writes are ordered by.

The clock hands out UTC epoch milliseconds strictly increasing within one session (so "newest" and supersede order
are total); the locks serialise one agent's read-then-write sequences (a batch's dedup and supersede) and one
tenant's imports. Neither grows with every session and agent ever seen.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable

from acn.common.models import Namespace

CLOCK_SESSIONS = 65_536  # sessions whose last stamp is remembered (SessionClock.now_ms)


class SessionClock:
    """The last stamp handed out per session (least recently used sessions forgotten past CLOCK_SESSIONS: a
    forgotten session's next stamp asks `latest` again)."""

    def __init__(self, latest: Callable[[str, Namespace], int]) -> None:
        self._latest = latest  # (tenant, namespace) -> the session's newest stored stamp not behind the wall clock
        self._lock = threading.Lock()
        self._last_ms: OrderedDict[tuple[str, str, str], int] = OrderedDict()

    def now_ms(self, tenant: str, namespace: Namespace) -> int:
        """Return UTC epoch ms, strictly increasing within one session."""
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._lock:
            known = key in self._last_ms
        if not known:  # read outside the lock: a new session's first read must not hold up the others
            latest = self._latest(tenant, namespace)
            with self._lock:
                self._last_ms[key] = max(self._last_ms.get(key, 0), latest)
        with self._lock:
            now = max(int(time.time() * 1000), self._last_ms.get(key, 0) + 1)
            self._last_ms[key] = now
            self._last_ms.move_to_end(key)
            while len(self._last_ms) > CLOCK_SESSIONS:
                self._last_ms.popitem(last=False)
            return now


class NamespaceLocks:
    """Per agent (and per tenant, for imports) the lock of its read-then-write sequences, kept only while someone
    holds it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._locks: weakref.WeakValueDictionary[tuple[str, str], threading.RLock] = weakref.WeakValueDictionary()

    def of(self, tenant: str, agent_id: str) -> threading.RLock:
        """Return the lock of one agent's memories ("" names the tenant's imports: no agent id is empty)."""
        key = (tenant, agent_id)
        with self._lock:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.RLock()
            return lock
