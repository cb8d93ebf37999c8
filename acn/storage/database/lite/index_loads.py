"""The session indexes of a read cache (read_cache.py): found, loaded once, warmed in the background, kept within
the cache's byte budget, and the sessions of each agent that hold rows.

A session's index holds every row the session can read (group_filter); a user's, every row of the user's. An index
whose rows are listed by id (the repository's member pages) loads on the caller's thread by primary-key lookups; one
that is not loads in the background by a filtered query (a Lite filter scans the collection), and a read meanwhile
is answered by the store. ReadCache keeps the state these methods share (its __init__ says what each part is).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from acn.common.errors import StoreUnavailableError
from acn.common.models import Memory, Namespace
from acn.storage.database.base import Filter, Record
from acn.storage.database.lite.load_once import LoadOnce
from acn.storage.database.lite.local_index import ROW_BYTES, LocalIndex
from acn.storage.database.lite.predicate import supported
from acn.storage.database.lite.read_priority import READS
from acn.storage.database.lite.sizes import (
    CACHED_AGENT_SESSIONS,
    CACHED_INDEXES,
    ID_LOOKUP,
    LISTED_LOAD_ROWS,
    LOAD_PAGE,
    PREWARM_WAIT,
    SAMPLE,
    SAMPLE_SHARE,
    TOKENIZE_CHUNK,
)
from acn.storage.database.lite.write_counters import Stamp
from acn.storage.database.memory_rows import (
    ID_CUTS,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    held_group_filter,
    id_range,
    is_session_group,
    tenant_filter,
)

log = logging.getLogger("acn.store")
K = TypeVar("K")
V = TypeVar("V")
GroupKey = tuple[str, str, str]  # tenant, agent, session
# The store query a cache loads with: (filter, fields, limit) -> rows of the memories collection.
Query = Callable[[Filter, list[str], int], list[Record]]


class IndexLoads:
    """The session-index half of ReadCache (a mixin: ReadCache.__init__ sets the state declared here)."""

    _query: Query
    _dense_dim: int
    extra_fields: list[str]
    _lock: threading.Lock
    _epoch: int
    _parked: OrderedDict[Hashable, tuple[Stamp, Any]]
    _indexes: OrderedDict[GroupKey, LocalIndex]
    _index_loads: LoadOnce[GroupKey, list[tuple[Memory, Record]]]
    _agent_sessions: OrderedDict[tuple[str, str], set[str]]
    _session_loads: LoadOnce[tuple[str, str], set[str]]
    known_empty: Callable[[GroupKey], bool]
    member_ids: Callable[[GroupKey], list[str] | None]
    stored_rows: Callable[[], int | None]
    _index_rows: int
    _max_bytes: int
    _background: bool
    _warming: set[GroupKey]
    _warm_queue: deque[tuple[GroupKey, int]]
    _warm_wakeup: threading.Event
    _warm_idle: threading.Event
    _warmer: threading.Thread | None
    _prewarming: dict[GroupKey, threading.Event]
    _untokenized: set[LocalIndex]
    _tokenize_wakeup: threading.Event
    _tokenizer: threading.Thread | None

    def _tokenize_later(self, index: LocalIndex) -> None:
        """Have the background thread tokenize the index's new rows (called with the cache lock held)."""
        self._untokenized.add(index)
        if self._tokenizer is None:
            self._tokenizer = threading.Thread(target=self._tokenize_loop, name="acn-tokenize", daemon=True)
            self._tokenizer.start()
        self._tokenize_wakeup.set()

    def _tokenize_loop(self) -> None:
        while True:
            self._tokenize_wakeup.wait()
            self._tokenize_wakeup.clear()
            with self._lock:
                work, self._untokenized = list(self._untokenized), set()
            for index in work:
                try:
                    index.index_pending()
                except Exception:  # the next search tokenizes what is left and reports any error itself
                    log.exception("tokenizing new rows failed")

    def local_index(self, tenant: str, namespace: Namespace, where: Filter | None = None, *,
                    wait: bool = False, store_sooner: Callable[[], bool] | None = None) -> LocalIndex | None:
        """Return the in-memory index of a session's rows (its own, its agent's agent-scope rows, the shared ones;
        a user's rows are in the user's index: group_index with memory_rows.user_group), or None: the store answers.

        None when `where` uses syntax the index cannot evaluate, when the session can read more rows than one
        store query returns (or, listed by id, more than index_rows), or while the index loads. A session's first
        read starts the load on a background thread and is answered by the store (a 10k-row session takes a second
        or more to load; a search in the store, tens of ms); `wait` (or a cache built with background=False) loads
        it on the caller's thread, except a session listed by id (member pages), loaded on the caller's thread up
        to LISTED_LOAD_ROWS rows and on the background thread beyond (unless `wait`). A session the start-up warmer
        is loading is waited for (no second load), unless `store_sooner` says the store answers sooner: then it does.
        """
        return self.group_index((tenant, namespace.agent_id, namespace.session_id), where, wait=wait,
                                store_sooner=store_sooner)

    def group_index(self, key: GroupKey, where: Filter | None = None, *, wait: bool = False,
                    store_sooner: Callable[[], bool] | None = None) -> LocalIndex | None:
        """Return the in-memory index of a group's rows (a session's, or a user's: memory_rows.held_group_filter),
        or None: the store answers (see local_index)."""
        if not self._index_rows or (where is not None and not supported(where)):
            return None
        with self._lock:
            prewarming = self._prewarming.get(key)
        # Loaded by id by the start-up warmer: a short wait, no second load (or the store, when it answers sooner).
        if prewarming is not None and not (store_sooner is not None and store_sooner()):
            prewarming.wait(PREWARM_WAIT)
        if wait:
            self.settle()  # a load already under way on the background thread finishes first
        with self._lock:
            index = recent(self._indexes, key)
            if index is not None:
                return index
            if self._index_loads.busy(key):
                return None
            has_sibling = is_session_group(key[2]) and self._sibling(key) is not None
        listed = None if self.known_empty(key) else self._listed_ids(key)
        if listed is not None and len(listed) > LISTED_LOAD_ROWS and self._background and not wait:
            self._warm_later(key)  # large: loaded by id off the request path; the store answers meanwhile
            return None
        if listed is not None or self.known_empty(key):  # no scan: load it now
            return self._load_index(key)
        if has_sibling and self._sessions_with_rows(key[0], key[1]) is not None:
            with self._lock:  # checked again: a write or a load may have come in between
                index = self._indexes.get(key)
                if index is None and not self._index_loads.busy(key):
                    index = self._sibling_view(key)
                if index is not None:
                    return index
        if wait or not self._background:
            return self._load_index(key)
        self._warm_later(key)
        return None

    def wait_loaded(self, key: GroupKey, timeout: float = PREWARM_WAIT) -> bool:
        """Wait while a load of a session's index is queued or under way (at most `timeout` seconds); return True
        once the index is held."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if key in self._indexes:
                    return True
                loading = key in self._warming or key in self._prewarming or key in self._index_loads.queues()
            if not loading or time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def prewarm(self, key: GroupKey) -> LocalIndex | None:
        """Load a session's index now, on the caller's thread (the start-up warmer's), tokenized before it returns;
        only one listed by id (member pages) or known empty: a session reached only by a scan is left cold. None
        when it is not loaded (too large, not listed, or a delete raced the load)."""
        if not self._index_rows or (not self.known_empty(key) and self._listed_ids(key) is None):
            return None
        done = threading.Event()
        with self._lock:
            if key in self._indexes:
                return recent(self._indexes, key)
            under_way = self._prewarming.get(key)
            if under_way is None:
                self._prewarming[key] = done
        if under_way is not None:  # another thread is loading it by id: its result, not a second load
            under_way.wait(PREWARM_WAIT)
            with self._lock:
                return self._indexes.get(key)
        try:
            # As any load (LoadOnce): writes landing meanwhile are replayed onto it, an invalidation (a delete, a
            # failed write) discards it.
            index = self._load_index(key)
            while index is not None and index.index_pending(TOKENIZE_CHUNK):
                pass  # before a waiting request has it: its first search must not tokenize the texts itself
        finally:
            with self._lock:
                self._prewarming.pop(key, None)
            done.set()
        return index

    def fits(self, rows: int, *, beside: int = 0) -> bool:
        """Return True when a session index of this many rows can be held beside those held now and `beside` rows
        more (none pushed out)."""
        with self._lock:
            held = sum(len(index) for index in self._indexes.values()) + beside
            return self._holdable(rows) and len(self._indexes) < CACHED_INDEXES and held + rows <= self._index_rows

    def estimate(self, rows: int) -> int:
        """Return about what a session index of this many rows holds (LocalIndex.nbytes, texts not counted)."""
        return rows * (ROW_BYTES + 4 * self._dense_dim)

    def _load_index(self, key: GroupKey) -> LocalIndex | None:
        return self._index_loads.load(key, lambda: self._read_group(key), overflows=lambda loaded: loaded is None,
                                      install=lambda loaded, queued: self._install_loaded(key, loaded, queued),
                                      installed=lambda: self._indexes.get(key))

    def _warm_later(self, key: GroupKey) -> None:
        """Queue a session's index for the background loader (once while it waits)."""
        with self._lock:
            if key in self._warming:
                return
            self._warming.add(key)
            self._warm_queue.append((key, READS.finished()))
            if self._warmer is None:
                self._warmer = threading.Thread(target=self._warm_loop, name="acn-index-warm", daemon=True)
                self._warmer.start()
        self._warm_wakeup.set()

    def _warm_loop(self) -> None:
        while True:
            self._warm_wakeup.wait()
            self._warm_wakeup.clear()
            while True:
                with self._lock:
                    if not self._warm_queue:
                        break
                    key, asked = self._warm_queue.popleft()
                try:
                    with READS.background(after=asked):
                        self._load_index(key)
                except StoreUnavailableError as error:  # closed or unreachable: the next read queues it again
                    log.warning("loading a session index failed: %s", error.message)
                except Exception:  # the store answers meanwhile; the next read queues the load again
                    log.exception("loading a session index failed")
                finally:
                    with self._lock:
                        self._warming.discard(key)
                        if not self._warming:
                            self._warm_idle.set()

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until no session index waits to load in the background (for tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if not self._warming:
                    return True
                self._warm_idle.clear()
            self._warm_idle.wait(0.05)
        return False

    def _read_group(self, key: GroupKey) -> LocalIndex | None:
        """Return a new index of every row the session can read (None: more than one query returns)."""
        if self.known_empty(key):  # writes that land meanwhile are replayed onto it (_index_loads)
            return LocalIndex(self._dense_dim)
        fields = OUTPUT_FIELDS + (["dense"] if self._dense_dim else []) + self.extra_fields
        where = tenant_filter(key[0]).and_(held_group_filter(key[1], key[2]))
        listed = self._listed_ids(key)
        if listed is not None:
            rows = self._rows_by_id(key[0], listed, fields)
        else:
            rows = self._query(where, fields, LOAD_PAGE)
        # A large session: read in id ranges, searches of others go in between.
        if listed is None and len(rows) >= LOAD_PAGE:
            sampled = QUERY_WINDOW // SAMPLE_SHARE
            if len(self._query(where.and_(SAMPLE), ["id"], sampled)) >= sampled:
                return None  # too large by the sample (an odd id space falls through to the ranges below)
            rows = []
            for low, high in zip(ID_CUTS, (*ID_CUTS[1:], None), strict=True):
                rows += self._query(where.and_(id_range(low, high)), fields, QUERY_WINDOW)
                if len(rows) >= QUERY_WINDOW:
                    return None
        index = LocalIndex(self._dense_dim)
        for row in rows:
            index.put_row(row, tokenize=False)
        # Tokenized before it serves a search (on the loader's thread, in the background by default): the first
        # search answered by the index must not segment thousands of texts itself. Loaded by id on a request's
        # thread (LISTED_LOAD_ROWS at most), it is tokenized by the background tokenizer instead (_install_loaded).
        while (listed is None or len(listed) > LISTED_LOAD_ROWS) and index.index_pending(TOKENIZE_CHUNK):
            time.sleep(0.001)  # let request threads have the interpreter between chunks
        return index

    def _listed_ids(self, key: GroupKey) -> list[str] | None:
        """Return the listed ids of the rows a session can read when an index of them may be held (else None)."""
        if not self._index_rows:
            return None
        ids = self.member_ids(key)
        return ids if ids is not None and self._holdable(len(ids)) else None

    def _holdable(self, rows: int) -> bool:
        """Return True when a session index of this many rows may be held at all: within index_rows, and its
        estimated bytes (LocalIndex.nbytes, texts not counted) within the byte budget."""
        return rows <= self._index_rows and self.estimate(rows) <= self._max_bytes

    def _rows_by_id(self, tenant: str, ids: list[str], fields: list[str]) -> list[Record]:
        """Return the rows with these ids, in primary-key lookups of ID_LOOKUP ids (a filter of `id in` alone)."""
        wanted = fields if "tenant" in fields else [*fields, "tenant"]
        rows: list[Record] = []
        for start in range(0, len(ids), ID_LOOKUP):
            chunk = ids[start: start + ID_LOOKUP]
            rows += self._query(Filter("id in {listed_ids}", {"listed_ids": chunk}), wanted, len(chunk))
        return [row for row in rows if row["tenant"] == tenant]

    def _install_loaded(self, key: GroupKey, index: LocalIndex | None,
                        queued: list[tuple[Memory, Record]]) -> LocalIndex | None:
        """Replay the writes that landed during the load, then keep the index (called with the lock held)."""
        if index is None:
            return None
        for memory, record in queued:
            index.put(memory, record, tokenize=False)
        self._install(key, index)
        if index.pending():
            self._tokenize_later(index)
        return index

    def _install(self, key: GroupKey, index: LocalIndex) -> None:
        """Keep a session's index, least recently used ones out first (called with the lock held)."""
        self._indexes[key] = index
        self._tokenize_later(index)
        while len(self._indexes) > 1 and (len(self._indexes) > CACHED_INDEXES or sum(
                len(kept) for kept in self._indexes.values()) > self._index_rows):
            self._indexes.popitem(last=False)
        self._within_budget(keep=index)

    def nbytes(self) -> int:
        """Return an estimate of the memory the session indexes and parked objects hold."""
        with self._lock:
            return self._held_bytes()

    def _held_bytes(self) -> int:
        return sum(index.nbytes() for index in self._indexes.values()) + sum(
            held_nbytes(value) for _, value in self._parked.values())

    def _within_budget(self, keep: object) -> None:
        """Drop parked objects, then session indexes, least recently used first, until what is held fits the byte
        budget (`keep`, the entry just installed, stays even if it alone is larger). Called with the lock held."""
        held = self._held_bytes()
        while held > self._max_bytes:
            parked = next((k for k, (_, value) in self._parked.items() if value is not keep), None)
            if parked is not None:
                held -= held_nbytes(self._parked.pop(parked)[1])
                continue
            index = next((k for k, value in self._indexes.items() if value is not keep), None)
            if index is None:
                return
            held -= self._indexes.pop(index).nbytes()

    def _sibling(self, key: GroupKey) -> LocalIndex | None:
        """Return a loaded index of another session of the same agent (called with the lock held)."""
        return next((index for other, index in self._indexes.items()
                     if other[:2] == key[:2] and is_session_group(other[2])), None)

    def _sibling_view(self, key: GroupKey) -> LocalIndex | None:
        """Return and keep the index of a session known to hold no rows of its own, built from a sibling's.

        A session reads its own rows, its agent's agent-scope rows and the shared rows (held_group_filter); a sibling
        reads the same but for its own session rows, so those are all that is left out. Called with the
        lock held: no write lands between the check and the copy, and later writes reach the new index.
        """
        sessions = self._agent_sessions.get(key[:2])
        sibling = self._sibling(key)
        if sessions is None or key[2] in sessions or sibling is None:
            return None
        index = sibling.subset(Filter('scope != "session" and scope != "user"'))
        self._install(key, index)
        return index

    def _sessions_with_rows(self, tenant: str, agent_id: str) -> set[str] | None:
        """Return every session of the agent holding session-scope rows (None: more than one query returns)."""
        key = (tenant, agent_id)
        with self._lock:
            known = recent(self._agent_sessions, key)
            if known is not None:
                return known
        listing = Filter('tenant == {listing_tenant} and agent_id == {listing_agent} and scope == "session"',
                         {"listing_tenant": tenant, "listing_agent": agent_id})
        # An overflowing agent is not listed again: each new session would pay for it twice.
        return self._session_loads.load(key, lambda: self._query(listing, ["session_id"], QUERY_WINDOW),
                                        overflows=lambda rows: len(rows) >= QUERY_WINDOW,
                                        install=lambda rows, written: self._install_sessions(key, rows, written),
                                        installed=lambda: self._agent_sessions.get(key))

    def _install_sessions(self, key: tuple[str, str], rows: list[Record], written: set[str]) -> set[str]:
        """Keep the agent's sessions: the rows listed plus the writes that landed during the query."""
        sessions = self._agent_sessions.setdefault(key, set())
        sessions.update(written, (str(row["session_id"]) for row in rows))
        while len(self._agent_sessions) > CACHED_AGENT_SESSIONS:
            self._agent_sessions.popitem(last=False)
        return sessions


def held_nbytes(value: object) -> int:
    """Return what a parked object says it holds (a dedup pool counts its index), else a small constant."""
    size = getattr(value, "nbytes", None)
    return int(size()) if callable(size) else 1024


def recent(cache: OrderedDict[K, V], key: K) -> V | None:
    """Return a cached value and mark it the most recently used (the caches drop the least recently used)."""
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value
