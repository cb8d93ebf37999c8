"""Throttling of wrong API keys per client address: a guessed key costs a growing wait, not a millisecond.

Every place that compares a presented key (the /v1 Bearer header, the /ui header and sign-in form, the keyed
answers of /healthz and /metrics) goes through `KeyGuard.authenticate`. A client address with more than
FREE_FAILURES wrong keys in a row is refused with 429 sign_in_throttled and Retry-After for 2, 4, 8, ... seconds
(at most MAX_WAIT_SECONDS), the wait doubling with each further wrong key. While an address waits
every key it sends is refused unchecked, the right one included: a guess answered during the wait would tell
the guesser whether it was right. Once the wait is over the right key works at once, but it clears nothing: a
tenant that sent 5 wrong keys and then its own right key, over and over, would otherwise guess 5 keys a round at
full speed (issue 49: 6,640 guesses in 10 s). The count is forgotten FAILURE_MEMORY_SECONDS after the address's
last wrong key.

A request without a key (a browser opening /v1, a health probe) is not a failure: only a presented, wrong key is.

With ACN_REDIS_URL the counts live in Redis, so replicas behind one load balancer share them (an address cannot
try N keys on each of K replicas). Redis unreachable: the counts of this process are used, and the fault logged.
The in-process table keeps the most recent ADDRESSES addresses, so a spray from many addresses cannot grow it.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Protocol

from acn.common.auth import authenticate
from acn.common.errors import SignInThrottledError, UnauthorizedError

log = logging.getLogger("acn.auth")

ADDRESSES = 65_536
# A person mistyping a key gets five tries at full speed; a guesser gets five, then waits 2, 4, 8 ... seconds.
FREE_FAILURES = 5
MAX_WAIT_SECONDS = 300
# A count is forgotten this long after an address's last wrong key.
FAILURE_MEMORY_SECONDS = 3600

# One call per failure: count it, and when past the free ones, set the wait (doubling) unless one is running.
# KEYS: count, block. ARGV: free failures, max wait ms, memory ms. Returns {count, wait ms (0: none)}.
_FAIL = """
local count = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], ARGV[3])
local free = tonumber(ARGV[1])
if count <= free then return {count, 0} end
local wait = math.min(1000 * 2 ^ (count - free), tonumber(ARGV[2]))
redis.call('SET', KEYS[2], '1', 'PX', wait)
return {count, wait}
"""
# One call per checked request: the wait left (ms, 0: none).
_CHECK = """
local left = redis.call('PTTL', KEYS[2])
if left < 0 then left = 0 end
return left
"""


class FailureCounts(Protocol):
    """Where failures per address are counted: this process, or Redis shared by the replicas."""

    def wait_left(self, address: str) -> float:
        """Return the seconds this address must still wait (0.0: none)."""

    def failed(self, address: str) -> float:
        """Count a wrong key; return the wait it starts (0.0: none yet)."""


def wait_after(count: int, free: int, max_wait: float) -> float:
    """Return the wait after `count` wrong keys in a row: none for the free ones, then 2, 4, 8 ... seconds."""
    return 0.0 if count <= free else min(2.0 ** min(count - free, 62), max_wait)


class LocalCounts:
    """Failures counted in this process (the most recent ADDRESSES addresses)."""

    def __init__(self, free: int, max_wait: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.free = free
        self.max_wait = max_wait
        self.clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, tuple[int, float, float]] = OrderedDict()  # count, blocked until, last

    def wait_left(self, address: str) -> float:
        now = self.clock()
        with self._lock:
            entry = self._entries.get(address)
            if entry is None:
                return 0.0
            if now - entry[2] > FAILURE_MEMORY_SECONDS:
                del self._entries[address]
                return 0.0
            return max(0.0, entry[1] - now)

    def failed(self, address: str) -> float:
        now = self.clock()
        with self._lock:
            count, until, last = self._entries.pop(address, (0, 0.0, now))
            count = 1 if now - last > FAILURE_MEMORY_SECONDS else count + 1
            wait = wait_after(count, self.free, self.max_wait)
            self._entries[address] = (count, now + wait if wait else until, now)
            while len(self._entries) > ADDRESSES:
                self._entries.popitem(last=False)
            return wait


class RedisCounts:
    """Failures counted in Redis, shared by every replica; this process's counts stand in while it is down."""

    def __init__(self, url: str, *, prefix: str, free: int, max_wait: float, client: Any = None) -> None:
        import redis  # only deployments that set ACN_REDIS_URL need the client

        self.free = free
        self.max_wait = max_wait
        self._prefix = prefix
        self._redis = client or redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0,
                                                     health_check_interval=30)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._fail = self._redis.register_script(_FAIL)
        self._check = self._redis.register_script(_CHECK)
        self.fallback = LocalCounts(free, max_wait)

    def _keys(self, address: str) -> list[str]:
        return [f"{self._prefix}:authfail:{address}", f"{self._prefix}:authwait:{address}"]

    def wait_left(self, address: str) -> float:
        try:
            left = self._check(keys=self._keys(address))
        except self._errors as error:
            log.warning("Redis unreachable for the key throttle: counting in this process (%s)", type(error).__name__)
            return self.fallback.wait_left(address)
        return int(left) / 1000

    def failed(self, address: str) -> float:
        try:
            _count, wait = self._fail(keys=self._keys(address),
                                      args=[self.free, int(self.max_wait * 1000), FAILURE_MEMORY_SECONDS * 1000])
        except self._errors as error:
            log.warning("Redis unreachable for the key throttle: counting in this process (%s)", type(error).__name__)
            return self.fallback.failed(address)
        return int(wait) / 1000

    def close(self) -> None:
        try:
            self._redis.close()
        except self._errors:  # at shutdown a Redis that is already gone has nothing left to close
            return


class KeyGuard:
    """Compare presented keys through the throttle of the client's address, and count what it refuses."""

    def __init__(self, counts: FailureCounts, observe: Callable[[str, str], None] | None = None) -> None:
        self.counts = counts
        self.observe = observe or (lambda _event, _where: None)

    def close(self) -> None:
        """Close the Redis connection the counts hold, if any (the app's runtime calls this as it closes)."""
        if isinstance(self.counts, RedisCounts):
            self.counts.close()

    def authenticate(self, authorization: str | None, keys: dict[str, str], address: str, where: str) -> str:
        """Return the tenant of the header's key; 401 for a wrong one, 429 while the address must wait."""
        if not keys:
            return authenticate(authorization, keys)
        self.check(address, where)
        try:
            return authenticate(authorization, keys)
        except UnauthorizedError:
            if (authorization or "").partition(" ")[2].strip():  # a key was presented, and it was wrong
                self.failed(address, where)
            raise

    def check(self, address: str, where: str) -> None:
        """Refuse (429) an address that must still wait."""
        left = self.counts.wait_left(address)
        if left > 0:
            self.observe("throttled", where)
            raise _throttled(left)

    def failed(self, address: str, where: str) -> None:
        """Count a wrong key; past the free ones, answer 429 at once (the wait starts now)."""
        self.observe("failed", where)
        wait = self.counts.failed(address)
        if wait > 0:
            self.observe("throttled", where)
            raise _throttled(wait)


def _throttled(seconds: float) -> SignInThrottledError:
    wait = max(1, math.ceil(seconds))
    return SignInThrottledError(f"too many wrong API keys from this address: try again in {wait} s",
                                seconds=wait)


def open_key_guard(redis_url: str, *, prefix: str, free: int = FREE_FAILURES, max_wait: float = MAX_WAIT_SECONDS,
                   observe: Callable[[str, str], None] | None = None) -> KeyGuard:
    """Return the guard: counts in Redis when ACN_REDIS_URL is set, else in this process."""
    counts: FailureCounts = (RedisCounts(redis_url, prefix=prefix, free=free, max_wait=max_wait) if redis_url
                             else LocalCounts(free, max_wait))
    return KeyGuard(counts, observe)
