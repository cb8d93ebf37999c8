"""Start-up warming: after a restart, what the first call of a recently active session needs is built in the
background, so that the call does not pay for it (issue 33).

Measured (cProfile, a Lite file of 20k memories over 40 sessions and one namespace of 5k, restarted): an existing
session's first memory_write spent ~65 % of its time loading the session's in-process index (its rows fetched by
primary key from the member pages, then each row made a Memory), ~15 % handing the index's rows to the dedup pool
and ~12 % building the dedup index; its first record_turn and assemble the same index load (70 % and 50 %). The
5k namespace's first memory_write: 1.6 s of index load, 0.3 s of rows handed over, 0.3 s of dedup index.

What is warmed, most recently written sessions first (memory heads' high-water marks): on a Lite file the
session's index (ReadCache.prewarm: by primary key only, tokenized) and the dedup pool a batch of the default
scope asks for first (parked under the write counters, as a batch parks it), and the filters an assemble tests
are tested once (acn/assembly/warm.py); against a server the dedup pool only (kept as load_shared keeps it,
brought up to date from the store by the next batch). At most WARM_SESSIONS sessions, within `budget_bytes`
(ACN_WARM_MB): a session not warmed works as before, its first call loading what it needs. On a Lite file a session
of up to ACN_LOCAL_INDEX_ROWS rows is warmed (a namespace of 100k: ~150 MB with its pool, ~1 min), and the sessions
that fit are warmed least recent first (Warmer.plan), the most recent one's index loaded before all of them
(first_index: the session likeliest to be asked for before ready). First, what a process's first writes ask Lite to
describe (MilvusStore.prepare_writes); last, the full garbage collection the pass made due (collect_garbage). /readyz
answers 503 ("warming") until the pass is done. Each session waits for the requests being handled (READS.give_way),
and the pass's store reads for a request's read: a request sent before ready has the interpreter to itself.

Why it stays correct: nothing warmed is trusted blindly. A session index loads through the read cache's
load-once protocol (writes landing meanwhile are replayed onto it, a delete discards it); a Lite pool is parked
with the write counters read before its rows and handed back only while they are unchanged; a server pool is
read again from its watermark (rows other replicas stamped since) and every memory it answers with is confirmed
in the store (Pool.load_shared). A request for a session being warmed waits for that load (ReadCache.prewarm) or
for the namespace lock the pool is built under: the work is never done twice.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import Callable

from acn.common.models import Namespace
from acn.memory.items import MemoryItem
from acn.memory.pool import Pool
from acn.storage.database import READS
from acn.storage.repositories import (
    CACHED_INDEXES,
    CACHED_POOLS,
    SHARED_KEPT,
    MemoryRepository,
    user_group,
    user_turns_group,
)

# Sessions warmed at most: as many as the caches keep (more would push the most recent out again).
WARM_SESSIONS = min(CACHED_POOLS, CACHED_INDEXES, SHARED_KEPT)
# A batch of the default scope and kind: what a session's first memory_write most often is.
DEFAULT_BATCH = [MemoryItem(content="-")]
STOP_WAIT = 10.0
# The conversation a warmed user's reads are made for: one with no row of its own, as a returning user's new one.
WARM_USER_SESSION = "acn-warm-new-conversation"
# About what a parked dedup pool holds a row (DedupIndex.nbytes: 71 MB for 100,000 rows of ~37 characters) and what
# a row's text adds to it and to the session index, for the estimate of a session before it is warmed (Lite).
POOL_ROW_BYTES = 700
TEXT_ROW_BYTES = 200
log = logging.getLogger("acn.store")
Reads = Callable[[str, Namespace], None]  # (tenant, namespace): reads to make of a warmed session
# (tenant, namespace, bytes allowed): text work to do for a warmed session, within the bytes; returns the bytes used.
TextWork = Callable[[str, Namespace, int], int]


def collect_garbage() -> None:
    """Make the full garbage collection the pass made due, before /readyz says ready.

    The pass leaves hundreds of thousands of new long-lived objects (index rows, postings, kept texts): the garbage
    collector's next full collection, due once such objects pile up, then ran inside whichever request allocated
    first after ready. Measured after a restart on a namespace of 10k memories (USE): a full collection of 80-126 ms
    of CPU, and a first memory_retrieve of 406 ms against a 20-40 ms median when it landed in one. Collected here,
    the next full collection waits until the heap grows by a quarter again (CPython's rule for the oldest
    generation).
    """
    gc.collect()


class Warmer:
    """The background pass that warms recently active sessions after a start; /readyz reports it."""

    def __init__(self, memories: MemoryRepository, *, budget_bytes: int, sessions: int = WARM_SESSIONS,
                 reads: Reads | None = None, texts: TextWork | None = None, texts_bytes: int = 0) -> None:
        self.memories = memories
        # Reads a node makes of a warmed session (acn/assembly/warm.py, wired by the runtime): made once, so that
        # what the index keeps of them is there before the first call.
        self.reads = reads
        # Text work for the warmed sessions, most recently active first, within texts_bytes for the whole pass (the
        # text cache's share, acn/assembly/warm.py's warm_texts): done after every session is warmed, so that the
        # most recent sessions get it and a pass over many sessions does not segment every text they hold.
        self.texts = texts
        self.texts_bytes = texts_bytes
        self.texts_used = 0
        self._warmed: list[tuple[str, Namespace]] = []
        self.budget_bytes = budget_bytes
        self.sessions = sessions
        self.done = threading.Event()
        # Set once the most recently active session's index is loaded (first_index) or the pass ended: start-up work
        # that can wait (the MCP SDK's imports, ~0.6 s under the interpreter lock) starts after it.
        self.first_loaded = threading.Event()
        self.thread: threading.Thread | None = None
        self.listed = 0  # sessions listed for warming
        self.warmed = 0  # sessions warmed
        self.cold = 0  # sessions left cold: over the budget or the in-process index's size
        self.held_bytes = 0  # estimated bytes of what was warmed
        self._stop = threading.Event()

    def start(self, *, existed: bool) -> Warmer:
        """Start the pass (nothing to warm when the memories collection is new, or with a budget of 0)."""
        if not existed or self.budget_bytes <= 0:
            self.first_loaded.set()
            self.done.set()
            return self
        self.thread = threading.Thread(target=self.run, name="acn-start-warm", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        """Stop after the session in hand (the store is closing): wait for it, STOP_WAIT seconds at most."""
        self._stop.set()
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(STOP_WAIT)

    def pending(self) -> list[str]:
        """Return what start-up work still runs (for /readyz)."""
        return [] if self.done.is_set() else ["warming"]

    def progress(self) -> dict[str, int]:
        return {"sessions": self.listed, "warmed": self.warmed, "cold": self.cold,
                "held_mb": self.held_bytes >> 20, "budget_mb": self.budget_bytes >> 20,
                "texts_kb": self.texts_used >> 10}

    def run(self) -> None:
        # Its store reads wait for a request's read in progress, and each session waits for the requests being
        # handled (READS.give_way): a request that arrives before ready (one process, no load balancer) loads what
        # it needs without the pass beside it.
        with READS.background():
            self._run()

    def _run(self) -> None:
        try:
            heads = self.memories.heads
            if heads.building is not None:  # heads and member pages first: sessions are listed and loaded by them
                heads.building.join()
            if self.memories.warming is not None:
                self.memories.warming.join()
            prepare = getattr(self.memories.store, "prepare_writes", None)
            if callable(prepare):  # what the first write of this process asks the store for once (milvus.py)
                prepare(self.memories.spec.name)
            recent = [(tenant, namespace) for tenant, namespace, _ in heads.recent_sessions(self.sessions)]
            self.listed = len(recent)
            planned = self.memories.cache is not None
            if planned and recent:  # the most recently active session's index first (see first_index)
                self.first_index(*recent[0])
            self.first_loaded.set()
            if planned:
                recent = self.plan(recent)
            for tenant, namespace in recent:
                READS.give_way()
                if self._stop.is_set():
                    break
                if not planned and self.held_bytes >= self.budget_bytes:
                    self.cold += 1
                    continue
                self.warm(tenant, namespace)
            self.warm_users()
            self.warm_texts()
            log.info("warmed %d recently active sessions (%d MB), %d left cold", self.warmed,
                     self.held_bytes >> 20, self.cold)
        except Exception:  # only a warm-up: the first calls load what they need themselves, as before
            log.exception("warming recently active sessions failed")
        finally:
            collect_garbage()
            self.first_loaded.set()
            self.done.set()

    def plan(self, recent: list[tuple[str, Namespace]]) -> list[tuple[str, Namespace]]:
        """Return the sessions to warm on a Lite file, least recently active first: the most recent ones whose
        estimated bytes fit the budget together (and whose rows fit the in-process index together); the rest are
        counted cold. Warmed in that order, the read cache's least-recently-used order is the sessions' own: should
        the estimates fall short, what the cache pushes out is the least recently active session's (a namespace of
        100,000 rows, the most recent, was warmed first and its dedup pool pushed out by the sessions after it)."""
        cache = self.memories.cache
        assert cache is not None
        chosen: list[tuple[str, Namespace]] = []
        planned_bytes = planned_rows = 0
        held = set(cache.indexes)  # loaded already (first_index): `fits` counts their rows as held
        for tenant, namespace in recent:
            listed = self.memories.heads.member_ids(tenant, namespace)
            rows = len(listed) if listed is not None else 0
            size = cache.estimate(rows) + (POOL_ROW_BYTES + TEXT_ROW_BYTES) * rows
            new_rows = 0 if (tenant, namespace.agent_id, namespace.session_id) in held else rows
            if listed is None or not cache.fits(new_rows, beside=planned_rows) or \
                    planned_bytes + size > self.budget_bytes:
                self.cold += 1  # larger than the in-process index (or what is left of the budget) holds
                continue
            chosen.append((tenant, namespace))
            planned_bytes, planned_rows = planned_bytes + size, planned_rows + new_rows
        return chosen[::-1]

    def first_index(self, tenant: str, namespace: Namespace) -> None:
        """Load the most recently active session's index before the others: the session most likely to be asked
        for first, maybe before /readyz says ready, when the request waits for this load (ReadCache.prewarm) rather
        than make its own beside the pass. bench.scale --quick (a namespace of 10k memories, the most recent, asked
        as soon as /healthz answered): the pass reached it last. Its reads and dedup pool come in the plan's order
        (warm touches the index again), so the cache's least-recently-used order stays the sessions' own."""
        cache = self.memories.cache
        assert cache is not None
        listed = self.memories.heads.member_ids(tenant, namespace)
        rows = len(listed) if listed is not None else 0
        if listed is None or not cache.fits(rows) or \
                cache.estimate(rows) + (POOL_ROW_BYTES + TEXT_ROW_BYTES) * rows > self.budget_bytes:
            return  # as the plan would not warm it (it counts it cold)
        before = cache.nbytes()
        if not self._stop.is_set():
            cache.prewarm((tenant, namespace.agent_id, namespace.session_id))
        self.held_bytes += cache.nbytes() - before  # warm() counts only what it adds to the index

    def warm_users(self) -> None:
        """Load the indexes of the most recently written users (Lite): a returning user's new conversation reads
        their memories from there (HeldIndexes.of, acn/storage/database/lite/held.py), not by a load on its first
        call."""
        cache = self.memories.cache
        if cache is None:
            return
        for tenant, agent, user in self.memories.heads.recent_users(self.sessions):
            READS.give_way()
            if self._stop.is_set() or self.held_bytes >= self.budget_bytes:
                break
            listed = self.memories.heads.user_member_ids(tenant, agent, user)
            if listed is None or not cache.fits(len(listed)):
                continue
            before = cache.nbytes()
            self.warm_archive(tenant, agent, user)  # first: the reads below search it as a new conversation does
            if cache.prewarm((tenant, agent, user_group(user))) is not None:
                # The reads and texts of a new conversation of the user (one with no row of its own: every such
                # conversation shares what these keep, MemoryQueries._reader_key).
                namespace = Namespace(agent_id=agent, session_id=WARM_USER_SESSION, user_id=user)
                if self.reads:
                    self.reads(tenant, namespace)
                self._warmed.append((tenant, namespace))
            self.held_bytes += cache.nbytes() - before

    def warm_archive(self, tenant: str, agent: str, user: str) -> None:
        """Load the index of the user's archived messages of all their conversations (Lite): a returning user's new
        conversation searches it beside its own rows (acn/storage/repositories/user_archive.py), not after a load on
        its first call."""
        cache = self.memories.cache
        listed = self.memories.heads.user_member_ids(tenant, agent, user, "turns")
        if cache is not None and listed and cache.fits(len(listed)) and self.held_bytes < self.budget_bytes:
            cache.prewarm((tenant, agent, user_turns_group(user)))

    def warm_texts(self) -> None:
        """Do the text work for the warmed sessions, most recently active first, until its bytes are used."""
        for tenant, namespace in reversed(self._warmed):
            READS.give_way()
            if self.texts is None or self.texts_used >= self.texts_bytes or self._stop.is_set():
                break
            self.texts_used += self.texts(tenant, namespace, self.texts_bytes - self.texts_used)

    def warm(self, tenant: str, namespace: Namespace) -> None:
        """Warm one session: its index (Lite), then its dedup pool; counted against the budget."""
        cache = self.memories.cache
        before = cache.nbytes() if cache is not None else 0
        if cache is not None:
            listed, key = self.memories.heads.member_ids(tenant, namespace), (tenant, namespace.agent_id,
                                                                              namespace.session_id)
            if listed is None or (key not in cache.indexes and not cache.fits(len(listed))):  # (held: first_index)
                self.cold += 1  # larger than the in-process index holds: its first call goes to the store
                return
            if cache.prewarm(key) is not None and self.reads:
                self.reads(tenant, namespace)
        pool = Pool.warm(self.memories, tenant, namespace, DEFAULT_BATCH)
        self.held_bytes += (cache.nbytes() - before) if cache is not None else pool.nbytes()
        self.warmed += 1
        self._warmed.append((tenant, namespace))
