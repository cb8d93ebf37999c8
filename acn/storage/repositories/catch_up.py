"""Reading again a store that answers an older session version than the one Redis says was committed.

A Milvus Lite server answers a primary-key read from one connection, now and then, with a row older than the one
another connection's acknowledged upsert wrote, under concurrent writers (docs/DEPLOYMENT.md, "A store that reads
behind"). A turn built on that older head would overwrite the newer one, or be refused at its commit (409
lease_lost although no replica stalled). The lease holder knows better: each commit records its version in Redis
(RedisCoordinator.note_committed), the next lease brings it back (Lease.committed), and the holder reads the store
again, briefly, until it shows at least that version. A store that stays behind is a 503 store_behind: nothing
written, the client retries.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from acn.common.errors import NotFoundError, StoreBehindError

# How long a lease holder reads again before the 503: well under a lease (ACN_REDIS_LEASE_MS, 10 s by default).
CATCH_UP_SECONDS = 3.0
FIRST_PAUSE = 0.005
LAST_PAUSE = 0.1
T = TypeVar("T")


def caught_up(read_version: Callable[[], int], version: int, committed: int, *, absent_ok: bool = False) -> int:
    """Return the stored version once it is at least `committed` (`version`: the one just read).

    A read mid-upsert may show no head at all (measured: version 0 read while the session was at 22). With
    `absent_ok`, a head that stays absent for the whole wait is a deleted session whose version Redis could not
    forget (SessionRepository.delete forgets it): 0 is returned, not a 503.
    """
    deadline = time.monotonic() + CATCH_UP_SECONDS
    pause = FIRST_PAUSE
    while version < committed:
        if time.monotonic() >= deadline:
            if absent_ok and version == 0:
                return 0
            raise StoreBehindError(f"the store still answers version {version} of this session, and version "
                                   f"{committed} was committed: nothing was written; retry")
        time.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE)
        version = read_version()
    return version


def read_visible(read: Callable[[], T], version: int) -> T:
    """Return read() of a version whose head was seen (so its rows exist), again while it says they do not."""
    deadline = time.monotonic() + CATCH_UP_SECONDS
    pause = FIRST_PAUSE
    while True:
        try:
            return read()
        except NotFoundError:
            if time.monotonic() >= deadline:
                raise StoreBehindError(f"the store shows the head of version {version} of this session but not "
                                       "its rows yet: nothing was written; retry") from None
        time.sleep(pause)
        pause = min(pause * 2, LAST_PAUSE)
