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
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar, cast

from acn.common.models import Memory, Namespace
from acn.storage.database.base import Filter, Record
from acn.storage.database.lite.index_loads import GroupKey, IndexLoads, Query, recent
from acn.storage.database.lite.load_once import LoadOnce
from acn.storage.database.lite.local_index import LocalIndex
from acn.storage.database.lite.sizes import (
    CACHED_AGENT_VIEWS,
    CACHED_ARCHIVE_ROWS,
    CACHED_ARCHIVES,
    CACHED_BYTES,
    CACHED_INDEX_ROWS,
    CACHED_POOLS,
    CACHED_VIEWS,
    CACHED_WRITE_COUNTERS,
    WARM_ON_WRITE,
)
from acn.storage.database.lite.write_counters import Stamp, read_counters, written_counters
from acn.storage.database.memory_rows import (
    NO_TURN,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    from_record,
    group_turns_user,
    group_user,
    session_filter,
)

T = TypeVar("T")
log = logging.getLogger("acn.store")


class ReadCache(IndexLoads):
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
        # Write counters that tell whether what a batch writer loaded is still what the store holds: one per owner
        # of a scope (an agent's agent scope, a user's, a session's own, a tenant's shared scope; write_counter),
        # and an epoch for deletes and failures. Archived messages are not counted (no dedup index holds them).
        self._epoch = 0
        self._writes: dict[Hashable, int] = {}
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
        # About how many rows the store holds in the collection the indexes are loaded from (None: not known), which
        # a first search of the store reads (HeldIndexes.store_sooner).
        self.stored_rows: Callable[[], int | None] = lambda: None
        self._index_rows = index_rows  # 0: no in-process index
        self.indexes_rows = index_rows  # rows in-process indexes may hold in all (0: every search goes to the store)
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
            if len(self._writes) >= CACHED_WRITE_COUNTERS:
                # Forgetting counters could let a stale stamp match again; a new epoch makes every earlier stamp
                # stale instead (parked objects are dropped: they are rebuilt on their next use).
                self._writes.clear()
                self._parked.clear()
                self._epoch += 1
            for counter in written_counters(tenant, memories):
                self._writes[counter] = self._writes.get(counter, 0) + 1
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

    def stamp(self, tenant: str, namespace: Namespace, scopes: Sequence[str] | None = None) -> Stamp:
        """Return the write counters of what a namespace reads in these scopes (None: all): (epoch, its agent
        scope's writes, its user's, its session's own, its tenant's shared scope's; 0 for a scope not read)."""
        with self._lock:
            return self._stamp(tenant, namespace, scopes)

    def _stamp(self, tenant: str, namespace: Namespace, scopes: Sequence[str] | None = None) -> Stamp:
        counters = read_counters(tenant, namespace, scopes)
        return (self._epoch, *(0 if counter is None else self._writes.get(counter, 0)  # type: ignore[return-value]
                               for counter in counters))

    def park(self, tenant: str, namespace: Namespace, key: Hashable, value: Any, stamp: Stamp,
             scopes: Sequence[str] | None = None) -> None:
        """Keep an object built from a namespace's memories as of `stamp` (e.g. a batch writer's dedup index).

        `unpark` hands it back only while nothing it depends on was written since; against a server nothing
        is kept.
        """
        with self._lock:
            if stamp != self._stamp(tenant, namespace, scopes):
                return
            self._parked[key] = (stamp, value)
            self._parked.move_to_end(key)
            while len(self._parked) > CACHED_POOLS:
                self._parked.popitem(last=False)
            self._within_budget(keep=value)

    def unpark(self, tenant: str, namespace: Namespace, key: Hashable,
               scopes: Sequence[str] | None = None) -> Any | None:
        """Take back a parked object if nothing it depends on was written since it was parked (it is removed)."""
        with self._lock:
            parked = self._parked.pop(key, None)
            if parked is None or parked[0] != self._stamp(tenant, namespace, scopes):
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

    def agent_view(self, tenant: str, namespace: Namespace, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until a memory the namespace reads is written (not an archived message: the
        namespace's stamp, as park/unpark use it), or anything is deleted.

        For reads of an agent's memories that a new memory can change, such as what is in force (standing
        memories): unlike `view`, inserting counts. Archived messages do not bump the stamp: a view that reads
        them must not be kept here.
        """
        with self._lock:
            stamp = self._stamp(tenant, namespace)
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
            return archive.absent(ids)

    def _session_archive(self, tenant: str, namespace: Namespace) -> SessionArchive | None:
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._lock:
            archive = recent(self._archives, key)
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

    def parked_current(self, tenant: str, namespace: Namespace, key: Hashable,
                       scopes: Sequence[str] | None = None) -> bool:
        """Return True when an object is parked under the key and nothing it depends on was written since."""
        with self._lock:
            parked = self._parked.get(key)
            return parked is not None and parked[0] == self._stamp(tenant, namespace, scopes)

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

    def absent(self, ids: Iterable[str]) -> set[str]:
        """Return the ids among `ids` that no message here has, looking up each: `set(ids) - by_id.keys()` went
        over every message of the session (a set minus a dict's keys view is worked out by the view, which copies the
        set and discards each of its own keys from it), ~0.4 ms a turn at turn 3,000 (issue 47)."""
        return {id_ for id_ in ids if id_ not in self.by_id}

    def of_turns(self, turns: Iterable[int]) -> list[Memory]:
        """Return the messages of the given turns."""
        return [m for turn in turns for m in self.by_turn.get(turn, {}).values()]


def _turn_of(memory: Memory) -> int:
    return memory.turn_range[0] if memory.turn_range else NO_TURN


