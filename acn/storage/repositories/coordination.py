"""Cross-process session leases in Redis, with fencing tokens checked at commit.

Several server processes may write one session through one Milvus. Milvus has no compare-and-set, so the
read-modify-commit of a turn is serialised by a lease per session held in Redis: Redis's documented
single-instance lock (SET key value NX PX, a random value per holder, release and renewal by a script that
compares the value first). A holder renews its lease while it works; a process that stops (SIGKILL, SIGSTOP, a
long GC pause) stops renewing and its lease expires, so the session is never locked for longer than one lease.

A lease alone does not stop a holder that stalled past its lease from writing late. Each acquisition therefore
gets a fencing token (a per-session counter incremented in the same script that takes the lock), and a commit
first runs `check`: one script that, atomically, confirms the caller still holds the lock with the newest token
and extends the lease. Only then does the store write. A stalled holder's late commit fails that check (409
lease_lost): the newer holder's versions are never overwritten. A holder whose lease expired while nobody else
took the session (the counter still at its token) passes the check and takes the lease back: a stall with nobody
waiting is not an error. The repository also stores the token in the session's head row and refuses a commit whose
token is older than the stored one (see acn/storage/repositories/sessions.py).

The residual window, stated plainly: the check and the store write are two calls (Milvus cannot check a token
itself), so a process that stalls for longer than a whole lease *between* the check and the write could still
write late. The check extends the lease to its full length, so that needs a pause of ACN_REDIS_LEASE_MS at that
exact point (the write follows the check within a millisecond).

Redis down: no lease can be taken or checked, so writes answer 503 coordination_unavailable (Retry-After), never
an unlocked write; redis-py reconnects on the next call once Redis is back.
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from acn.common.errors import CoordinationUnavailableError, LeaseLostError, SessionBusyError

if TYPE_CHECKING:
    from acn.common.settings import Settings

log = logging.getLogger("acn.coordination")

# Take the lock; on success, bump the session's fencing counter and return it (0: someone else holds the lock).
# A missing counter (new session, evicted or Redis restarted empty) starts at Redis's clock in microseconds, so
# tokens keep growing across a Redis restart unless a session took more leases than microseconds passed.
# With the token, the version the session's last holder committed ('' when none is known: see _COMMITTED).
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if redis.call('EXISTS', KEYS[2]) == 0 then
    local now = redis.call('TIME')
    redis.call('SET', KEYS[2], now[1] .. string.format('%06d', tonumber(now[2])))
  end
  local token = redis.call('INCR', KEYS[2])
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
  return {token, redis.call('GET', KEYS[3]) or ''}
end
return {0, ''}
"""
# Still the holder, with the newest token? Then extend the lease (renewal, and the fencing check at commit).
# A lease that expired while nobody took the session is taken back: every acquisition bumps the fencing counter,
# so a counter still at this holder's token proves no one else held the session since, let alone wrote it. A
# stall (a GC pause, a starved process) with nobody waiting then costs nothing; with a waiter, the waiter won.
_CHECK = """
if redis.call('GET', KEYS[2]) ~= ARGV[3] then
  return 0
end
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
if not holder then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
return 0
"""
# After the store write: the version this holder (still the holder, or holding nobody else's lease) committed.
_COMMITTED = """
if redis.call('GET', KEYS[2]) ~= ARGV[2] then
  return 0
end
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[1] then
  return 0
end
redis.call('SET', KEYS[3], ARGV[3], 'PX', ARGV[4])
return 1
"""
# Delete the lock only if it is still ours (an expired lease may already belong to someone else).
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""
# Fencing counters outlive leases by far; an idle session's counter may go (it restarts from the clock).
FENCE_TTL_MS = 7 * 24 * 3600 * 1000


@dataclass
class Lease:
    """One held session lease: the lock value only this holder knows and its fencing token."""

    key: str
    value: str
    token: int
    depth: int = 1
    lost: bool = False
    read_version: int | None = None  # the head version this holder read under the lease
    acquired: float = field(default_factory=time.monotonic)
    renewed: float = field(default_factory=time.monotonic)  # the last time Redis confirmed it (for the 409's message)
    committed: int | None = None  # the version the previous holder committed, when Redis knows it


class RedisCoordinator:
    """Session leases and fencing tokens in one Redis (the single-instance lock pattern)."""

    def __init__(self, url: str, *, prefix: str = "acn", lease_ms: int = 10_000, wait_seconds: float = 10.0,
                 client: Any = None, store: str = "") -> None:
        import redis  # only deployments that set ACN_REDIS_URL need the client

        self.lease_ms = lease_ms
        # Committed versions are facts about one store: two deployments sharing a Redis and a collection prefix
        # over two Milvus instances must not wait for each other's versions (leases shared are only serialised).
        self._store_tag = hashlib.sha256(store.encode("utf-8")).hexdigest()[:12]
        self.wait_seconds = wait_seconds
        self._prefix = prefix
        # Short socket timeouts: a dead Redis must turn into a quick 503, not a request thread stuck for minutes.
        self._redis = client or redis.Redis.from_url(url, socket_connect_timeout=1.0, socket_timeout=2.0,
                                                     health_check_interval=30)
        self._errors: tuple[type[BaseException], ...] = (redis.RedisError, OSError)
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._check = self._redis.register_script(_CHECK)
        self._release = self._redis.register_script(_RELEASE)
        self._committed = self._redis.register_script(_COMMITTED)
        self._local = threading.local()
        self._held: dict[int, Lease] = {}  # id(lease) -> lease, for the renewer
        self._held_lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # -- holding -------------------------------------------------------------------------------

    @contextmanager
    def hold(self, session_key: str) -> Iterator[Lease]:
        """Hold the session's lease for the block (re-entrant within a thread)."""
        leases = self._thread_leases()
        held = leases.get(session_key)
        if held is not None:
            held.depth += 1
            try:
                yield held
            finally:
                held.depth -= 1
            return
        lease = self._take(session_key)
        leases[session_key] = lease
        with self._held_lock:
            self._held[id(lease)] = lease
        self._ensure_renewer()
        try:
            yield lease
        finally:
            del leases[session_key]
            with self._held_lock:
                self._held.pop(id(lease), None)
            self._give_back(lease)

    def current(self, session_key: str) -> Lease | None:
        """Return the lease this thread holds on the session, if any."""
        return self._thread_leases().get(session_key)

    def check(self, lease: Lease) -> None:
        """Fencing check before a commit: still the holder with the newest token (the lease is extended)."""
        if lease.lost or not self._still_held(lease):
            lease.lost = True
            now = time.monotonic()
            raise LeaseLostError(f"this request's lease on the session expired and another request took it (the "
                                 f"server stalled: held {now - lease.acquired:.1f} s, last renewed "
                                 f"{now - lease.renewed:.1f} s ago, lease {self.lease_ms} ms): nothing was "
                                 "written; reload and retry")

    def note_committed(self, lease: Lease, version: int) -> None:
        """Record in Redis the version this holder just wrote, for the next holder (see sessions.head).

        A store may answer a read from another connection with a version older than the one just written (a Milvus
        Lite server does, now and then, under concurrent writers: docs/DEPLOYMENT.md); Redis is the one place
        every replica reads the same truth from. Failing here loses nothing: the write is done, and the next
        holder reads the store as before.
        """
        keys = [self._lock_key(lease.key), self._fence_key(lease.key), self._version_key(lease.key)]
        try:
            self._committed(keys=keys, args=[lease.value, lease.token, version, FENCE_TTL_MS])
        except self._errors:
            log.warning("could not record version %d of a session in Redis; the next holder reads the store", version)

    def forget_versions(self, session_keys: list[str]) -> None:
        """Forget the committed versions of deleted sessions (a failure costs their next lease a wait, see catch_up)."""
        if not session_keys:
            return
        try:
            self._redis.delete(*(self._version_key(key) for key in session_keys))
        except self._errors:
            log.warning("could not forget the versions of %d deleted sessions in Redis", len(session_keys))

    def ping(self) -> bool:
        """Return True when Redis answers."""
        try:
            return bool(self._redis.ping())
        except self._errors:
            return False

    def close(self) -> None:
        self._stop.set()
        try:
            self._redis.close()
        except self._errors:
            pass

    # -- Redis calls ---------------------------------------------------------------------------

    def _take(self, session_key: str) -> Lease:
        value = secrets.token_hex(16)
        keys = [self._lock_key(session_key), self._fence_key(session_key), self._version_key(session_key)]
        deadline = time.monotonic() + self.wait_seconds
        pause = 0.002
        while True:
            try:
                answer = self._acquire(keys=keys, args=[value, self.lease_ms, FENCE_TTL_MS])
            except self._errors as error:
                raise CoordinationUnavailableError(f"the coordination service (Redis) is unreachable: {error}; "
                                                   "nothing was written") from error
            token, committed = int(answer[0]), answer[1]
            if token:
                return Lease(key=session_key, value=value, token=token, committed=committed_version(committed))
            if time.monotonic() >= deadline:
                raise SessionBusyError(f"another request held this session for over {self.wait_seconds:g} s; "
                                       "nothing was written: retry")
            # Jittered back-off: waiters of one session do not poll Redis in lockstep.
            time.sleep(pause * (0.5 + random.random()))
            pause = min(pause * 2, 0.05)

    def _still_held(self, lease: Lease) -> bool:
        keys = [self._lock_key(lease.key), self._fence_key(lease.key)]
        try:
            held = bool(self._check(keys=keys, args=[lease.value, self.lease_ms, lease.token]))
        except self._errors as error:
            raise CoordinationUnavailableError(f"the coordination service (Redis) is unreachable: {error}; "
                                               "nothing was written") from error
        if held:
            lease.renewed = time.monotonic()
        return held

    def _give_back(self, lease: Lease) -> None:
        try:
            self._release(keys=[self._lock_key(lease.key)], args=[lease.value])
        except self._errors:
            # The lease expires by itself; the next holder waits at most one lease.
            log.warning("could not release a session lease; it expires in %d ms", self.lease_ms)

    def _renew_all(self) -> None:
        with self._held_lock:
            leases = [lease for lease in self._held.values() if not lease.lost]
        for lease in leases:
            try:
                if not self._still_held(lease):
                    lease.lost = True  # expired while this process stalled: its commit will be refused
            except CoordinationUnavailableError:
                pass  # Redis unreachable: the commit's own check answers 503; the lease may still be valid

    def _renew_loop(self) -> None:
        # Renew at a third of the lease: two renewals can fail before the lease runs out.
        while not self._stop.wait(self.lease_ms / 3000):
            try:
                self._renew_all()
            except Exception:  # noqa: BLE001 - the one renewer thread must outlive any surprise, or every lease lapses
                log.exception("renewing the session leases failed; trying again in %d ms", self.lease_ms // 3)

    def _ensure_renewer(self) -> None:
        if self._renewer is None:
            with self._held_lock:
                if self._renewer is None:
                    self._renewer = threading.Thread(target=self._renew_loop, name="acn-lease-renewer",
                                                     daemon=True)
                    self._renewer.start()

    def _thread_leases(self) -> dict[str, Lease]:
        leases = getattr(self._local, "leases", None)
        if leases is None:
            leases = self._local.leases = {}
        return leases

    def _lock_key(self, session_key: str) -> str:
        return f"{self._prefix}:lease:{session_key}"

    def _fence_key(self, session_key: str) -> str:
        return f"{self._prefix}:fence:{session_key}"

    def _version_key(self, session_key: str) -> str:
        return f"{self._prefix}:version:{self._store_tag}:{session_key}"


def committed_version(raw: bytes | str | None) -> int | None:
    """Return the version Redis holds for a session, None when it holds none (or something that is not one)."""
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else (raw or "")
    return int(text) if text.isdigit() and len(text) <= 18 else None


def open_coordinator(settings: Settings) -> RedisCoordinator | None:
    """Return the Redis coordinator ACN_REDIS_URL names; without one, say who must be the only writer."""
    if not settings.redis_url:
        if settings.is_server_uri:
            log.warning("no ACN_REDIS_URL: sessions are locked inside this process only, so this server must be the "
                        "only one writing to %s (set ACN_REDIS_URL to run several replicas)",
                        settings.milvus_uri.split("@")[-1])
        return None
    coordinator = RedisCoordinator(settings.redis_url, prefix=settings.collection_prefix,
                                   lease_ms=settings.redis_lease_ms, wait_seconds=settings.redis_lock_wait_seconds,
                                   store=re.sub(r"//[^/@]*@", "//", settings.milvus_uri))  # without credentials
    if not coordinator.ping():
        # Not fatal: reads work without Redis, writes answer 503 until it is reachable.
        log.warning("Redis at ACN_REDIS_URL does not answer yet: session writes answer 503 until it does")
    return coordinator
