"""What a repository over a Lite file keeps in memory, kept current by its own writes.

With a Lite file this process is the only writer, so reads that every turn repeats are served from memory: the
archived messages of recent sessions (neighbour expansion looks up turns by number), views that only a supersede,
an update or a delete can change, parked batch indexes (a writer's dedup pool), the in-memory search index of
each recent session (lite/local_index.py) and, per agent, the sessions that hold rows. Against a server other
processes write too, so MemoryRepository builds no ReadCache there.

Three counters tell what is still current: `_epoch` bumps on deletes and failed writes (everything is dropped),
`_revision` on writes that can change a view, `_archive_epoch` on archive writes; per agent, the write counters of
`stamp` (what parked objects and `agent_view`, e.g. a namespace's standing memories, are checked against). Loads
follow one protocol (acn/storage/database/lite/load_once.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar, cast

from acn.common.errors import StoreUnavailableError
from acn.common.models import Memory, Namespace
from acn.storage.database.base import Filter, Record
from acn.storage.database.lite.load_once import LoadOnce
from acn.storage.database.lite.local_index import ROW_BYTES, LocalIndex
from acn.storage.database.lite.predicate import supported
from acn.storage.database.lite.read_priority import READS
from acn.storage.database.memory_rows import (
    ID_CUTS,
    NO_TURN,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    from_record,
    group_turns_user,
    group_user,
    held_group_filter,
    id_range,
    is_session_group,
    session_filter,
    tenant_filter,
)

# The caches, named and sized in one place. Session archives: at most CACHED_ARCHIVES sessions and about
# CACHED_ARCHIVE_ROWS archived messages in all (the most recently used sessions stay).
CACHED_ARCHIVES = 256
CACHED_ARCHIVE_ROWS = 200_000
CACHED_VIEWS = 1024
CACHED_AGENT_VIEWS = 256  # views of what an agent's namespace reads (agent_view), least recently used out first
CACHED_POOLS = 64
# Sessions whose readable rows are searched in memory: at most this many (and about as many rows in all as the
# repository is given). A session that can read more rows than the store's query window is searched in the store.
CACHED_INDEXES = 256
CACHED_INDEX_ROWS = 200_000  # the default of ACN_LOCAL_INDEX_ROWS: one namespace of 200k rows fits (~1 KB a row)
# A batch of this many rows for one session (an import, a seeded store) starts loading its index at once: see
# ReadCache.after_save. Smaller writes (a turn, a few memories) leave it to the session's first read, as before.
WARM_ON_WRITE = 100
CACHED_BYTES = 256 << 20  # the default of ACN_READ_CACHE_MB
TOKENIZE_CHUNK = 200  # rows a loading index tokenizes between pauses
LOAD_PAGE = 2000  # a session index reads up to this many rows in one query, more in id ranges (ID_CUTS)
# One sixteenth of the ids of memories and of archived messages (both hex, evenly spread). A session whose rows
# fill LOAD_PAGE is first sampled there: more than a sixteenth of a query window in the slice, and the whole would
# not fit one either. Lite builds every row a query returns in Python (~50 us a row): at 100k memories in one
# namespace, reading ranges until the window overflowed took ~1.5 s, the sample ~0.3 s.
SAMPLE = Filter('(id >= "mem_0" and id < "mem_1") or (id >= "turn_0" and id < "turn_1")')
SAMPLE_SHARE = 16
# A session index loaded by id on the request's thread up to this many rows; a larger one (up to the repository's
# index_rows, and within its byte budget) loads by id on a background thread, tokenized there before it serves: the
# start-up warmer's (acn/app/warmer.py), or the loader's after a large write or a first read. Until then the store
# answers its reads (correct, slower): a request does not wait for a load of seconds (100k rows: ~2 s of lookups and
# ~20 s of tokenizing), except for the start-up warmer's, which /readyz reports (see local_index).
LISTED_LOAD_ROWS = 20_000
ID_LOOKUP = 500  # ids in one primary-key lookup (9 ms on Lite at 200k rows)
CACHED_AGENT_SESSIONS = 1024  # agents whose sessions with rows are known (see ReadCache._agent_sessions)
PREWARM_WAIT = 30.0  # seconds a request waits at most for the start-up warmer's load of its session index
CACHED_AGENT_COUNTERS = 65_536  # agents whose write counters are kept (see ReadCache.after_save)
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
log = logging.getLogger("acn.store")
Stamp = tuple[int, int, int]
GroupKey = tuple[str, str, str]  # tenant, agent, session
# The store query a cache loads with: (filter, fields, limit) -> rows of the memories collection.
Query = Callable[[Filter, list[str], int], list[Record]]


class ReadCache:
    """The in-memory reads of one Lite repository: archives, views, parked objects, session indexes."""

    def __init__(self, query: Query, *, dense_dim: int, index_rows: int = CACHED_INDEX_ROWS,
                 max_bytes: int = CACHED_BYTES, background: bool = True) -> None:
        self._query = query
        self._dense_dim = dense_dim
        self.extra_fields: list[str] = []  # read with every row besides OUTPUT_FIELDS (the embedded flag)
        self._lock = threading.Lock()
        self._archives: OrderedDict[tuple[str, str, str], SessionArchive] = OrderedDict()
        self._archive_epoch = 0  # bumps on every archive write: a load that raced one is not kept
        self._revision = 0  # bumps on writes that can change a view (not on inserting new memories)
        self._views: dict[Hashable, tuple[int, Any]] = {}
        self._agent_views: OrderedDict[Hashable, tuple[Stamp, Any]] = OrderedDict()  # see agent_view
        # Write counters that tell whether what a batch writer loaded is still what the store holds: per
        # agent (its session, user and agent scopes), per tenant for the shared scope, and an epoch for
        # deletes and failures. Archived messages are not counted (no dedup index holds them).
        self._epoch = 0
        self._agent_writes: dict[tuple[str, str], int] = {}
        self._shared_writes: dict[str, int] = {}
        self._parked: OrderedDict[Hashable, tuple[Stamp, Any]] = OrderedDict()
        # Search indexes per (tenant, agent, session): the rows a session can read (see group_filter). Writes
        # that land while one loads are queued and replayed onto it (a write is idempotent by id).
        self._indexes: OrderedDict[GroupKey, LocalIndex] = OrderedDict()
        self._index_loads: LoadOnce[GroupKey, list[tuple[Memory, Record]]] = LoadOnce(
            self._lock, lambda: self._epoch, list)
        # Per (tenant, agent): every session that holds session-scope rows, complete (each write adds its
        # session; a delete may leave one listed, which only costs a scan). A new session absent from it reads
        # exactly what a loaded sibling session reads minus that sibling's own rows: no scan of the collection
        # (a Lite filter costs ~200 ms at 100k rows however little it matches). Sets being loaded collect the
        # writes that land meanwhile, like the index loads.
        self._agent_sessions: OrderedDict[tuple[str, str], set[str]] = OrderedDict()
        self._session_loads: LoadOnce[tuple[str, str], set[str]] = LoadOnce(self._lock, lambda: self._epoch, set)
        # Whether a session can read no row at all, known without a scan (the repository's memory heads): such a
        # session's index is empty from the start and kept by the writes (no load in the background).
        self.known_empty: Callable[[GroupKey], bool] = lambda key: False
        # The ids of every row a session can read, listed by primary key (None: not known): such an index loads by
        # primary-key lookups, on the caller's thread, whatever the collection holds.
        self.member_ids: Callable[[GroupKey], list[str] | None] = lambda key: None
        self._index_rows = index_rows  # 0: no in-process index
        self._max_bytes = max_bytes  # session indexes and parked objects, in all (estimated: see nbytes)
        # Session indexes waiting for the background loader (see local_index).
        self._background = background
        self._warming: set[GroupKey] = set()
        # Each waiting key with READS.finished() as of the read that asked for it: the load's reads come after
        # that request's own store read and never alongside a request's read
        # (acn/storage/database/lite/read_priority.py).
        self._warm_queue: deque[tuple[GroupKey, int]] = deque()
        self._warm_wakeup = threading.Event()
        self._warm_idle = threading.Event()
        self._warmer: threading.Thread | None = None
        # Session indexes the start-up warmer (acn/app/warmer.py) is loading: a request for one waits for that
        # load (bounded by PREWARM_WAIT) instead of answering from a scan of the store or loading it a second time.
        self._prewarming: dict[GroupKey, threading.Event] = {}
        # Indexes with rows whose text a background thread tokenizes (LocalIndex.index_pending).
        self._untokenized: set[LocalIndex] = set()
        self._tokenize_wakeup = threading.Event()
        self._tokenizer: threading.Thread | None = None

    @property
    def indexes(self) -> dict[GroupKey, LocalIndex]:
        """The session indexes held now (a copy), for tests and diagnostics."""
        with self._lock:
            return dict(self._indexes)

    def after_save(self, tenant: str, memories: list[Memory], records: list[Record], fresh: set[str]) -> None:
        """Bring the caches up to date with a batch that landed, and start loading the index of a session that
        wrote WARM_ON_WRITE rows or more and has none yet.

        Until a session's index is loaded its searches go to the store, beside the loader: at 10k rows in one
        namespace the first 30-odd searches after the rows were written took 60-400 ms against a 3-6 ms median,
        the whole of memory_retrieve's p95 (bench/tail.py, issue 35). A session written in bulk is about to be
        read; its index now loads while it is written, and later batches land in it as they come.
        """
        with self._lock:
            self._index_saved(tenant, memories, records)
            cold = self._cold_sessions(tenant, memories)
            for memory in memories:
                if memory.scope == "session":
                    for known in (self._agent_sessions.get((tenant, memory.agent_id)),
                                  self._session_loads.queues().get((tenant, memory.agent_id))):
                        if known is not None:
                            known.add(memory.session_id)
            if any(m.valid_to or (m.id not in fresh and m.kind != "turn") for m in memories):
                self._revision += 1
            if len(self._agent_writes) >= CACHED_AGENT_COUNTERS:
                # Forgetting counters could let a stale stamp match again; a new epoch makes every earlier stamp
                # stale instead (parked objects are dropped: they are rebuilt on their next use).
                self._agent_writes.clear()
                self._shared_writes.clear()
                self._parked.clear()
                self._epoch += 1
            counted = [m for m in memories if m.kind != "turn"]
            for agent in {(tenant, m.agent_id) for m in counted}:
                self._agent_writes[agent] = self._agent_writes.get(agent, 0) + 1
            if any(m.scope == "shared" for m in counted):
                self._shared_writes[tenant] = self._shared_writes.get(tenant, 0) + 1
            for memory in memories:
                if memory.kind != "turn":
                    continue
                self._archive_epoch += 1
                archive = self._archives.get((tenant, memory.agent_id, memory.session_id))
                if archive is not None:
                    archive.put(memory)
        for key in cold:
            self._warm_later(key)

    def _cold_sessions(self, tenant: str, memories: list[Memory]) -> list[GroupKey]:
        """Return the sessions this batch wrote WARM_ON_WRITE rows or more to that have no index, none loading
        (called with the lock held)."""
        if not self._background or not self._index_rows or len(memories) < WARM_ON_WRITE:
            return []
        counts: dict[GroupKey, int] = {}
        for memory in memories:
            key = (tenant, memory.agent_id, memory.session_id)
            counts[key] = counts.get(key, 0) + 1
        return [key for key, count in counts.items() if count >= WARM_ON_WRITE and key not in self._indexes
                and not self._index_loads.busy(key) and key not in self._warming]

    def vectors_filled(self, tenant: str, memories: list[Memory], records: list[Record]) -> None:
        """Put rows whose vectors were just written into the indexes (nothing else a vector changes)."""
        with self._lock:
            self._index_saved(tenant, memories, records)

    def _index_saved(self, tenant: str, memories: list[Memory], records: list[Record]) -> None:
        """Put saved rows into the indexes (and queues of indexes loading) of the sessions that can read them."""
        by_agent: dict[str, list[tuple[Memory, Record]]] = {}
        shared: list[tuple[Memory, Record]] = []
        for memory, record in zip(memories, records, strict=True):
            (shared if memory.scope == "shared" else by_agent.setdefault(memory.agent_id, [])).append((memory, record))
        loading = self._index_loads.queues()
        for key in (*self._indexes, *loading):
            if key[0] != tenant or not (shared or key[1] in by_agent):
                continue
            user, archive = group_user(key[2]), group_turns_user(key[2])
            if user is not None:  # a user's index: their user-scope rows only
                mine = [(m, r) for m, r in by_agent.get(key[1], ()) if m.scope == "user" and m.user_id == user]
            elif archive is not None:  # a user's archive: their archived messages of every conversation
                mine = [(m, r) for m, r in by_agent.get(key[1], ()) if m.kind == "turn" and m.user_id == archive]
            else:  # a session's: its own rows, its agent's agent-scope rows, the shared ones (no user's)
                mine = shared + [(m, r) for m, r in by_agent.get(key[1], ())
                                 if m.scope == "agent" or (m.scope == "session" and m.session_id == key[2])]
            if not mine:
                continue
            index = self._indexes.get(key)
            if index is not None:
                for memory, record in mine:
                    index.put(memory, record, tokenize=False)
                self._tokenize_later(index)
            if key in loading:
                loading[key].extend(mine)

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

    def forget_all(self) -> None:
        """Drop everything: part of a failed batch may have landed unrecorded, a delete may change any view."""
        with self._lock:
            self._indexes.clear()
            self._index_loads.clear_overflow()
            self._agent_sessions.clear()
            self._session_loads.clear_overflow()  # a delete may have made an agent small again
            self._archives.clear()
            self._views.clear()
            self._agent_views.clear()
            self._parked.clear()
            self._revision += 1
            self._archive_epoch += 1
            self._epoch += 1

    def stamp(self, tenant: str, agent_id: str) -> Stamp:
        """Return the write counters an agent's memories depend on: (epoch, agent's writes, shared writes)."""
        with self._lock:
            return self._stamp(tenant, agent_id)

    def _stamp(self, tenant: str, agent_id: str) -> Stamp:
        return self._epoch, self._agent_writes.get((tenant, agent_id), 0), self._shared_writes.get(tenant, 0)

    def park(self, tenant: str, agent_id: str, key: Hashable, value: Any, stamp: Stamp) -> None:
        """Keep an object built from an agent's memories as of `stamp` (e.g. a batch writer's dedup index).

        `unpark` hands it back only while nothing it depends on was written since; against a server nothing
        is kept.
        """
        with self._lock:
            if stamp != self._stamp(tenant, agent_id):
                return
            self._parked[key] = (stamp, value)
            self._parked.move_to_end(key)
            while len(self._parked) > CACHED_POOLS:
                self._parked.popitem(last=False)
            self._within_budget(keep=value)

    def unpark(self, tenant: str, agent_id: str, key: Hashable) -> Any | None:
        """Take back a parked object if nothing it depends on was written since it was parked (it is removed)."""
        with self._lock:
            parked = self._parked.pop(key, None)
            if parked is None or parked[0] != self._stamp(tenant, agent_id):
                return None
            return parked[1]

    def view(self, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until a write that could change it (supersede, update, delete).

        Only for views that inserting brand-new memories cannot change, such as "which values were superseded".
        """
        with self._lock:
            revision = self._revision
            cached = self._views.get(key)
        if cached is not None and cached[0] == revision:
            return cast(T, cached[1])
        value = compute()
        with self._lock:
            if len(self._views) >= CACHED_VIEWS:
                self._views.clear()
            self._views[key] = (revision, value)  # a write during compute() bumped the revision: recomputed next time
        return value

    def agent_view(self, tenant: str, agent_id: str, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until the agent (or the tenant's shared scope) writes a memory that is not
        an archived message, or anything is deleted (the agent's stamp, as park/unpark use it).

        For reads of an agent's memories that a new memory can change, such as what is in force (standing
        memories): unlike `view`, inserting counts. Archived messages do not bump the stamp: a view that reads
        them must not be kept here.
        """
        with self._lock:
            stamp = self._stamp(tenant, agent_id)
            cached = self._agent_views.get(key)
            if cached is not None and cached[0] == stamp:
                self._agent_views.move_to_end(key)
                return cast(T, cached[1])
        value = compute()
        with self._lock:  # a write during compute() changed the stamp: this one is stale at once, recomputed next
            self._agent_views[key] = (stamp, value)
            self._agent_views.move_to_end(key)
            while len(self._agent_views) > CACHED_AGENT_VIEWS:
                self._agent_views.popitem(last=False)
        return value

    def archived_messages(self, tenant: str, namespace: Namespace, turns: set[int]) -> list[Memory] | None:
        """Return the session's live archived messages of the given turns, in stored order (None: ask the store)."""
        archive = self._session_archive(tenant, namespace)
        if archive is None:
            return None
        with self._lock:  # a concurrent save may be adding to this session's archive
            stored = archive.of_turns(turns)
        return sorted((m for m in stored if m.scope == "session" and not m.valid_to),
                      key=lambda m: (m.created_at, m.id))

    def absent_archive_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str]) -> set[str]:
        """Return the ids among `ids` that the session's archive certainly does not hold."""
        archive = self._session_archive(tenant, namespace)
        if archive is None:
            return set()
        with self._lock:
            return set(ids) - archive.by_id.keys()

    def _session_archive(self, tenant: str, namespace: Namespace) -> SessionArchive | None:
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._lock:
            archive = _recent(self._archives, key)
            if archive is not None:
                return archive
            epoch = self._archive_epoch
        where = session_filter(tenant, namespace).and_(Filter('kind == "turn"'))
        index = self.local_index(tenant, namespace)
        if index is not None:
            archive = SessionArchive(index.select(where))
        else:
            rows = self._query(where, OUTPUT_FIELDS, QUERY_WINDOW)
            if len(rows) >= QUERY_WINDOW:
                return None
            archive = SessionArchive(map(from_record, rows))
        with self._lock:
            if epoch == self._archive_epoch:  # no archive write raced the read
                self._archives[key] = archive
                while len(self._archives) > 1 and (len(self._archives) > CACHED_ARCHIVES or sum(
                        len(kept) for kept in self._archives.values()) > CACHED_ARCHIVE_ROWS):
                    self._archives.popitem(last=False)
        return archive

    # -- session indexes -------------------------------------------------------------------

    def local_index(self, tenant: str, namespace: Namespace, where: Filter | None = None, *,
                    wait: bool = False) -> LocalIndex | None:
        """Return the in-memory index of a session's rows (its own, its agent's agent-scope rows, the shared ones;
        a user's rows are in the user's index: group_index with memory_rows.user_group), or None: the store answers.

        None when `where` uses syntax the index cannot evaluate, when the session can read more rows than one
        store query returns (or, listed by id, more than index_rows), or while the index loads. A session's first
        read starts the load on a background thread and is answered by the store (a 10k-row session takes a second
        or more to load; a search in the store, tens of ms); `wait` (or a cache built with background=False) loads
        it on the caller's thread, except a session listed by id (member pages), loaded on the caller's thread up
        to LISTED_LOAD_ROWS rows and on the background thread beyond (unless `wait`).
        """
        return self.group_index((tenant, namespace.agent_id, namespace.session_id), where, wait=wait)

    def group_index(self, key: GroupKey, where: Filter | None = None, *, wait: bool = False) -> LocalIndex | None:
        """Return the in-memory index of a group's rows (a session's, or a user's: memory_rows.held_group_filter),
        or None: the store answers (see local_index)."""
        if not self._index_rows or (where is not None and not supported(where)):
            return None
        with self._lock:
            prewarming = self._prewarming.get(key)
        if prewarming is not None:  # loaded by id by the start-up warmer: a short wait, no second load
            prewarming.wait(PREWARM_WAIT)
        if wait:
            self.settle()  # a load already under way on the background thread finishes first
        with self._lock:
            index = _recent(self._indexes, key)
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

    @property
    def indexes_rows(self) -> int:
        """Return the rows in-process indexes may hold in all (0: none kept, every search goes to the store)."""
        return self._index_rows

    def prewarm(self, key: GroupKey) -> LocalIndex | None:
        """Load a session's index now, on the caller's thread (the start-up warmer's), tokenized before it returns;
        only one listed by id (member pages) or known empty: a session reached only by a scan is left cold. None
        when it is not loaded (too large, not listed, or a delete raced the load)."""
        if not self._index_rows or (not self.known_empty(key) and self._listed_ids(key) is None):
            return None
        done = threading.Event()
        with self._lock:
            if key in self._indexes:
                return _recent(self._indexes, key)
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

    def parked_current(self, tenant: str, agent_id: str, key: Hashable) -> bool:
        """Return True when an object is parked under the key and nothing it depends on was written since."""
        with self._lock:
            parked = self._parked.get(key)
            return parked is not None and parked[0] == self._stamp(tenant, agent_id)

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
            _nbytes(value) for _, value in self._parked.values())

    def _within_budget(self, keep: object) -> None:
        """Drop parked objects, then session indexes, least recently used first, until what is held fits the byte
        budget (`keep`, the entry just installed, stays even if it alone is larger). Called with the lock held."""
        held = self._held_bytes()
        while held > self._max_bytes:
            parked = next((k for k, (_, value) in self._parked.items() if value is not keep), None)
            if parked is not None:
                held -= _nbytes(self._parked.pop(parked)[1])
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
            known = _recent(self._agent_sessions, key)
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


class SessionArchive:
    """A session's archived messages by id, and by turn number (what neighbour expansion looks up)."""

    def __init__(self, messages: Iterable[Memory] = ()) -> None:
        self.by_id: dict[str, Memory] = {}
        self.by_turn: dict[int, dict[str, Memory]] = {}
        for message in messages:
            self.put(message)

    def __len__(self) -> int:
        return len(self.by_id)

    def put(self, message: Memory) -> None:
        """Add a message or replace the one with the same id."""
        old = self.by_id.get(message.id)
        if old is not None:
            self.by_turn.get(_turn_of(old), {}).pop(old.id, None)
        self.by_id[message.id] = message
        self.by_turn.setdefault(_turn_of(message), {})[message.id] = message

    def of_turns(self, turns: Iterable[int]) -> list[Memory]:
        """Return the messages of the given turns."""
        return [m for turn in turns for m in self.by_turn.get(turn, {}).values()]


def _nbytes(value: object) -> int:
    """Return what a parked object says it holds (a dedup pool counts its index), else a small constant."""
    size = getattr(value, "nbytes", None)
    return int(size()) if callable(size) else 1024


def _recent(cache: OrderedDict[K, V], key: K) -> V | None:
    """Return a cached value and mark it the most recently used (the caches drop the least recently used)."""
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _turn_of(memory: Memory) -> int:
    return memory.turn_range[0] if memory.turn_range else NO_TURN


