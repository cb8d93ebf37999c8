"""Memories over a MemoryStore: records, namespaces and scopes, monotonic time, history."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from common.errors import ProviderError, ProviderTimeoutError
from common.models import Memory, Namespace
from providers.embedders import Embedder
from storage.base import CollectionSpec, Filter, Hit, MemoryStore, Record
from storage.local_index import DISTINCT_FETCH, LocalIndex
from storage.predicate import supported
from storage.sealed import CIPHER_FIELD, RefusedStore, RowSealer, SealedStore, sealing_problem

ALL_SCOPES = ("session", "user", "agent", "shared")
MEMORY_FIELDS = {
    "tenant": "varchar", "agent_id": "varchar", "session_id": "varchar", "user_id": "varchar",
    "scope": "varchar", "kind": "varchar", "key": "varchar", "importance": "float",
    "created_at": "int64", "updated_at": "int64", "version": "int64", "valid_to": "int64",
    "superseded_by": "varchar", "turn_from": "int64", "turn_to": "int64", "doc": "json",
}
OUTPUT_FIELDS = ["id", "content", *MEMORY_FIELDS]
# A collection with vectors holds this flag: 1 once a row's vector is its text's, 0 while the row waits in the
# embedding backlog (storage/embedding_backlog.py) with PENDING_VECTOR. Dense search reads only flagged rows.
EMBEDDED_FIELD = "embedded"
EMBEDDED = Filter("embedded == 1")
NO_TURN = -1
# The store's query window: a session archive larger than this is read from the store each time.
QUERY_WINDOW = 16384
# Session archives kept in memory: at most this many sessions, and about this many archived messages in all
# (the most recently used sessions stay).
CACHED_ARCHIVES = 256
CACHED_ARCHIVE_ROWS = 200_000
CACHED_VIEWS = 1024
CACHED_POOLS = 64
# Sessions whose readable rows are searched in memory: at most this many (and about as many rows in all as the
# repository is given). A session that can read more rows than the store's query window is searched in the store.
CACHED_INDEXES = 256
CACHED_INDEX_ROWS = 50_000
CACHED_AGENT_SESSIONS = 1024  # agents whose sessions with rows are known (see MemoryRepository._agent_sessions)
T = TypeVar("T")
K = TypeVar("K")
V = TypeVar("V")
log = logging.getLogger("acn.store")
Stamp = tuple[int, int, int]
GroupKey = tuple[str, str, str]  # tenant, agent, session


@dataclass(slots=True)  # not frozen: a search makes one per candidate, and a frozen init costs twice as much
class Scored:
    """A memory with the raw relevance signals a search produced."""

    memory: Memory
    bm25: float = 0.0
    dense: float = 0.0
    bm25_rank: int | None = None  # 1-based position in the BM25 list, for rank fusion
    dense_rank: int | None = None  # 1-based position in the dense list


def memory_spec(prefix: str, dense_dim: int, *, sealed: bool = False, flagged: bool = True) -> CollectionSpec:
    """Return the memories collection spec; an embedder's dimension is part of the collection name.

    Sealed (encrypted at rest, storage/sealed.py): another collection, whose BM25 field holds hashed tokens and
    which has a field for the ciphertext. With a dimension, the EMBEDDED_FIELD flag too (flagged=False: a
    collection created before the flag existed).
    """
    name = f"{prefix}_memories" + (f"_d{dense_dim}" if dense_dim else "") + ("_sealed" if sealed else "")
    fields = {**MEMORY_FIELDS, **({EMBEDDED_FIELD: "int64"} if dense_dim and flagged else {})}
    if not sealed:
        return CollectionSpec(name=name, scalar_fields=fields, text_field="content",
                              dense_dim=dense_dim, partition_key="tenant")
    return CollectionSpec(name=name, scalar_fields={**fields, CIPHER_FIELD: "varchar"}, text_field="content",
                          dense_dim=dense_dim, partition_key="tenant", analyzer="hashed")


def pending_vector(dim: int) -> list[float]:
    """Return the vector a row holds until its own is computed: a unit vector (a zero vector has no cosine; some
    engines refuse one). Never compared: dense search filters on EMBEDDED."""
    return [1.0] + [0.0] * (dim - 1)


def to_record(memory: Memory, tenant: str, vector: list[float] | None) -> Record:
    """Return the store row of a memory."""
    turn_from, turn_to = (memory.turn_range or [NO_TURN, NO_TURN])[:2]
    record: Record = {
        "id": memory.id, "content": memory.content, "tenant": tenant, "agent_id": memory.agent_id,
        "session_id": memory.session_id, "user_id": memory.user_id or "", "scope": memory.scope,
        "kind": memory.kind, "key": memory.key or "", "importance": float(memory.importance),
        "created_at": memory.created_at, "updated_at": memory.updated_at, "version": memory.version,
        "valid_to": memory.valid_to or 0, "superseded_by": memory.superseded_by or "",
        "turn_from": turn_from, "turn_to": turn_to,
        "doc": {"meta": memory.meta, "source_ids": memory.source_ids, "history": memory.history or []},
    }
    if vector is not None:
        record["dense"] = vector
    return record


def from_record(record: Record) -> Memory:
    """Return the memory of a store row."""
    doc = record.get("doc") or {}
    has_turns = record.get("turn_from", NO_TURN) != NO_TURN
    return Memory(
        id=record["id"], kind=record["kind"], content=record["content"], key=record["key"] or None,
        importance=round(float(record["importance"]), 3), scope=record["scope"], agent_id=record["agent_id"],
        session_id=record["session_id"], user_id=record["user_id"] or None, created_at=record["created_at"],
        updated_at=record["updated_at"], version=record["version"], valid_to=record["valid_to"] or None,
        superseded_by=record["superseded_by"] or None,
        turn_range=[record["turn_from"], record["turn_to"]] if has_turns else None,
        source_ids=doc.get("source_ids"), meta=doc.get("meta") or {}, history=doc.get("history") or None,
    )


def new_memory_id() -> str:
    """Return a fresh memory id."""
    return "mem_" + uuid.uuid4().hex


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


def one_per_text(hits: list[tuple[Memory, float]], limit: int) -> list[tuple[Memory, float]]:
    """Return at most `limit` hits, best first, one per text: the best-scoring copy, the newest of equally
    scoring ones (a repeated line is as recent as its last repetition). As LocalIndex's distinct search."""
    place: dict[str, int] = {}
    kept: list[tuple[Memory, float]] = []
    for memory, score in hits:
        at = place.get(memory.content)
        if at is None:
            if len(kept) < limit:
                place[memory.content] = len(kept)
                kept.append((memory, score))
        elif score == kept[at][1] and memory.updated_at > kept[at][0].updated_at:
            kept[at] = (memory, score)
    return kept


def _recent(cache: OrderedDict[K, V], key: K) -> V | None:
    """Return a cached value and mark it the most recently used (the caches drop the least recently used)."""
    value = cache.get(key)
    if value is not None:
        cache.move_to_end(key)
    return value


def _turn_of(memory: Memory) -> int:
    return memory.turn_range[0] if memory.turn_range else NO_TURN


class MemoryRepository:
    """Read and write memories of one tenant's namespaces; scopes decide who sees what."""

    def __init__(self, store: MemoryStore, *, prefix: str, embedder: Embedder | None,
                 index_rows: int = CACHED_INDEX_ROWS, sealer: RowSealer | None = None,
                 embed_later: bool = False) -> None:
        self.embedder = embedder
        # embed_later: rows are written with PENDING_VECTOR and EMBEDDED 0, and on_pending hears of them (the
        # backlog worker embeds them); write_order keeps each save and each vector fill whole, in store order.
        self.embed_later = embed_later and embedder is not None
        self.flagged = embedder is not None
        self.on_pending: Callable[[str, list[tuple[str, str]]], None] | None = None
        self.write_order = threading.RLock()
        self._prefix = prefix
        # With a sealer (ACN_ENCRYPTION_KEY) rows are encrypted at rest: the store wrapper seals and opens them,
        # so everything here, the in-process index included, works on plain rows.
        self.sealer = sealer
        self.spec = memory_spec(prefix, embedder.dim if embedder else 0, sealed=sealer is not None)
        self._twin = memory_spec(prefix, embedder.dim if embedder else 0, sealed=sealer is None)
        self._raw_store = store
        self.store: MemoryStore = SealedStore(store, sealer, {self.spec.name}) if sealer else store
        self._clock_lock = threading.Lock()
        self._last_ms: dict[tuple[str, str, str], int] = {}
        self._namespace_locks: dict[tuple[str, str], threading.RLock] = {}
        # With a Lite file this process is the only writer, so reads that every turn repeats are served from
        # memory and kept current by the writes themselves (against a server, other processes write too: no
        # caching there): the archived messages of recent sessions (neighbour expansion looks up turns by
        # number), views that only a supersede, an update or a delete can change, and parked batch indexes.
        self._exclusive = not getattr(store, "is_server", True)
        self._cache_lock = threading.Lock()
        self._archives: OrderedDict[tuple[str, str, str], SessionArchive] = OrderedDict()
        self._archive_epoch = 0  # bumps on every archive write: a load that raced one is not kept
        self._revision = 0  # bumps on writes that can change a view (not on inserting new memories)
        self._views: dict[Hashable, tuple[int, Any]] = {}
        # Write counters that tell whether what a batch writer loaded is still what the store holds: per
        # agent (its session, user and agent scopes), per tenant for the shared scope, and an epoch for
        # deletes and failures. Archived messages are not counted (no dedup index holds them).
        self._epoch = 0
        self._agent_writes: dict[tuple[str, str], int] = {}
        self._shared_writes: dict[str, int] = {}
        self._parked: OrderedDict[Hashable, tuple[Stamp, Any]] = OrderedDict()
        # Search indexes per (tenant, agent, session): the rows a session can read (see group_filter). Writes
        # that land while one loads are queued in _loading and replayed onto it (a write is idempotent by id).
        self._indexes: OrderedDict[GroupKey, LocalIndex] = OrderedDict()
        self._loading: dict[GroupKey, list[tuple[Memory, Record]]] = {}
        # Per (tenant, agent): every session that holds session-scope rows, complete (each write adds its
        # session; a delete may leave one listed, which only costs a scan). A new session absent from it reads
        # exactly what a loaded sibling session reads minus that sibling's own rows: no scan of the collection
        # (a Lite filter costs ~200 ms at 100k rows however little it matches). Sets being loaded collect the
        # writes that land meanwhile, like _loading.
        self._agent_sessions: OrderedDict[tuple[str, str], set[str]] = OrderedDict()
        self._agent_sessions_loading: dict[tuple[str, str], set[str]] = {}
        self._agent_sessions_overflow: set[tuple[str, str]] = set()  # more session rows than a query returns
        self._oversized: set[GroupKey] = set()
        self._index_rows = index_rows  # 0: no in-process index
        # Indexes with rows whose text a background thread tokenizes (LocalIndex.index_pending).
        self._untokenized: set[LocalIndex] = set()
        self._tokenize_wakeup = threading.Event()
        self._tokenizer: threading.Thread | None = None

    def namespace_lock(self, tenant: str, namespace: Namespace) -> threading.RLock:
        """Return the lock that serialises read-then-write sequences of one agent's memories."""
        key = (tenant, namespace.agent_id)
        with self._clock_lock:
            return self._namespace_locks.setdefault(key, threading.RLock())

    def open(self) -> None:
        """Create and load the collection.

        Memories written with the other key setting, or with another key, are refused: every read and write then
        answers encryption_key_error (the server still starts, as with encrypted session snapshots).
        """
        self.store.ensure(self.spec)
        names = self.store.field_names(self.spec.name) if self.flagged else None
        if names is not None and EMBEDDED_FIELD not in names:
            # Written before rows could wait for vectors (no flag field): embed on the request path, as then.
            log.warning("collection %s has no %s field: rows are embedded as they are written",
                        self.spec.name, EMBEDDED_FIELD)
            self.flagged = self.embed_later = False
            self.spec = memory_spec(self._prefix, self.spec.dense_dim, sealed=self.sealer is not None, flagged=False)
        problem = sealing_problem(self._raw_store, self.spec, self._twin, self.sealer)
        if problem is not None:
            log.error("memories refused: %s", problem.message)
            self.store = RefusedStore(self.store, problem)

    def digest(self, text: str) -> str:
        """Return a hex digest of text for ids derived from content: keyed when rows are encrypted at rest (a plain
        hash would let anyone holding the files confirm a guessed message)."""
        if self.sealer is not None:
            return self.sealer.digest(text)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    # -- time ------------------------------------------------------------------------------

    def now_ms(self, tenant: str, namespace: Namespace) -> int:
        """Return UTC epoch ms, strictly increasing within one session (seed 004 §5.3)."""
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._clock_lock:
            known = key in self._last_ms
        if not known:  # read outside the lock: a new session's first read must not hold up the others
            latest = self._latest_in_session(tenant, namespace)
            with self._clock_lock:
                self._last_ms[key] = max(self._last_ms.get(key, 0), latest)
        with self._clock_lock:
            now = max(int(time.time() * 1000), self._last_ms[key] + 1)
            self._last_ms[key] = now
            return now

    def _latest_in_session(self, tenant: str, namespace: Namespace) -> int:
        index = self._local_index(tenant, namespace)
        if index is not None:  # a new session's first write loads the index its later reads need anyway
            return max((m.updated_at for m in index.select(session_filter(tenant, namespace))), default=0)
        rows = self.store.query(self.spec.name, session_filter(tenant, namespace),
                                fields=["updated_at"], limit=16384)
        return max((int(row["updated_at"]) for row in rows), default=0)

    # -- writes ----------------------------------------------------------------------------

    def save(self, tenant: str, memories: list[Memory], *, new_ids: set[str] | None = None) -> None:
        """Insert or replace memories (embedding them when an embedder is configured).

        Ids in new_ids are known not to exist yet and are inserted without the upsert's lookup.
        """
        vectors: list[list[float] | None] = [None] * len(memories)
        if self.embedder and memories and not self.embed_later:
            vectors = list(self.embedder.embed_batch([m.content for m in memories]))
        records = [to_record(m, tenant, v) for m, v in zip(memories, vectors, strict=True)]
        if self.flagged:
            for record in records:
                record[EMBEDDED_FIELD] = int("dense" in record)
                record.setdefault("dense", pending_vector(self.spec.dense_dim))
        fresh = new_ids or set()
        with self.write_order:
            try:
                self.store.insert(self.spec.name, [r for r in records if r["id"] in fresh])
                self.store.upsert(self.spec.name, [r for r in records if r["id"] not in fresh])
            except BaseException:
                self._forget_all()  # part of the batch may have landed: nothing cached can be trusted
                raise
            self._after_save(tenant, memories, records, fresh)
        if self.embed_later and memories and self.on_pending is not None:
            self.on_pending(tenant, [(m.id, m.content) for m in memories])

    def delete_ids(self, tenant: str, ids: list[str]) -> None:
        """Delete memories by id within a tenant."""
        if ids:
            try:
                self.store.delete(self.spec.name, Filter("tenant == {t} and id in {ids}", {"t": tenant, "ids": ids}))
            finally:
                self._forget_all()

    def delete_namespace(self, tenant: str, agent_id: str, session_id: str | None, user_id: str | None) -> None:
        """Delete every memory of an agent, optionally narrowed to one session or one user."""
        try:
            self.store.delete(self.spec.name, namespace_filter(tenant, agent_id, session_id, user_id))
        finally:
            self._forget_all()

    # -- what this process keeps in memory (Lite only) -------------------------------------

    def _after_save(self, tenant: str, memories: list[Memory], records: list[Record], fresh: set[str]) -> None:
        """Bring the caches up to date with a batch that landed."""
        if not self._exclusive:
            return
        with self._cache_lock:
            self._index_saved(tenant, memories, records)
            for memory in memories:
                if memory.scope == "session":
                    for known in (self._agent_sessions.get((tenant, memory.agent_id)),
                                  self._agent_sessions_loading.get((tenant, memory.agent_id))):
                        if known is not None:
                            known.add(memory.session_id)
            if any(m.valid_to or (m.id not in fresh and m.kind != "turn") for m in memories):
                self._revision += 1
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

    def _index_saved(self, tenant: str, memories: list[Memory], records: list[Record]) -> None:
        """Put saved rows into the indexes (and queues of indexes loading) of the sessions that can read them."""
        by_agent: dict[str, list[tuple[Memory, Record]]] = {}
        shared: list[tuple[Memory, Record]] = []
        for memory, record in zip(memories, records, strict=True):
            (shared if memory.scope == "shared" else by_agent.setdefault(memory.agent_id, [])).append((memory, record))
        for key in (*self._indexes, *self._loading):
            if key[0] != tenant or not (shared or key[1] in by_agent):
                continue
            mine = shared + [(m, r) for m, r in by_agent.get(key[1], ())
                             if m.scope != "session" or m.session_id == key[2]]
            if not mine:
                continue
            index = self._indexes.get(key)
            if index is not None:
                for memory, record in mine:
                    index.put(memory, record, tokenize=False)
                self._tokenize_later(index)
            if key in self._loading:
                self._loading[key].extend(mine)

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
            with self._cache_lock:
                work, self._untokenized = list(self._untokenized), set()
            for index in work:
                try:
                    index.index_pending()
                except Exception:  # the next search tokenizes what is left and reports any error itself
                    log.exception("tokenizing new rows failed")

    def _forget_all(self) -> None:
        with self._cache_lock:
            self._indexes.clear()
            self._oversized.clear()
            self._agent_sessions.clear()  # part of a failed batch may have landed unrecorded
            self._agent_sessions_overflow.clear()  # a delete may have made an agent small again
            self._archives.clear()
            self._views.clear()
            self._parked.clear()
            self._revision += 1
            self._archive_epoch += 1
            self._epoch += 1

    def stamp(self, tenant: str, agent_id: str) -> Stamp:
        """Return the write counters an agent's memories depend on: (epoch, agent's writes, shared writes)."""
        with self._cache_lock:
            return self._stamp(tenant, agent_id)

    def _stamp(self, tenant: str, agent_id: str) -> Stamp:
        return self._epoch, self._agent_writes.get((tenant, agent_id), 0), self._shared_writes.get(tenant, 0)

    def park(self, tenant: str, agent_id: str, key: Hashable, value: Any, stamp: Stamp) -> None:
        """Keep an object built from an agent's memories as of `stamp` (e.g. a batch writer's dedup index).

        `unpark` hands it back only while nothing it depends on was written since; against a server nothing
        is kept.
        """
        if not self._exclusive:
            return
        with self._cache_lock:
            if stamp != self._stamp(tenant, agent_id):
                return
            self._parked[key] = (stamp, value)
            self._parked.move_to_end(key)
            while len(self._parked) > CACHED_POOLS:
                self._parked.popitem(last=False)

    def unpark(self, tenant: str, agent_id: str, key: Hashable) -> Any | None:
        """Take back a parked object if nothing it depends on was written since it was parked (it is removed)."""
        with self._cache_lock:
            parked = self._parked.pop(key, None)
            if parked is None or parked[0] != self._stamp(tenant, agent_id):
                return None
            return parked[1]

    def view(self, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until a write that could change it (supersede, update, delete).

        Only for views that inserting brand-new memories cannot change, such as "which values were superseded".
        """
        if not self._exclusive:
            return compute()
        with self._cache_lock:
            revision = self._revision
            cached = self._views.get(key)
        if cached is not None and cached[0] == revision:
            return cached[1]
        value = compute()
        with self._cache_lock:
            if len(self._views) >= CACHED_VIEWS:
                self._views.clear()
            self._views[key] = (revision, value)  # a write during compute() bumped the revision: recomputed next time
        return value

    def archived_messages(self, tenant: str, namespace: Namespace, turns: Sequence[int]) -> list[Memory]:
        """Return the session's live archived messages of the given turn numbers, in stored order."""
        wanted = set(turns)
        if not wanted:
            return []
        archive = self._session_archive(tenant, namespace) if self._exclusive else None
        if archive is None:
            where = (session_filter(tenant, namespace).and_(live_filter(False))
                     .and_(Filter('scope == "session" and kind == "turn" and turn_from in {near}',
                                  {"near": sorted(wanted)})))
            rows = self.store.query(self.spec.name, where, fields=OUTPUT_FIELDS, limit=QUERY_WINDOW)
            return sorted((from_record(r) for r in rows), key=lambda m: (m.created_at, m.id))
        with self._cache_lock:  # a concurrent save may be adding to this session's archive
            stored = archive.of_turns(wanted)
        return sorted((m for m in stored if m.scope == "session" and not m.valid_to),
                      key=lambda m: (m.created_at, m.id))

    def absent_archive_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str]) -> set[str]:
        """Return the ids among `ids` that the session's archive certainly does not hold (Lite only).

        Those can be inserted; the rest must be upserted. Inserting skips the upsert's primary-key lookup,
        whose cost grows with the collection (a retried turn rewrites rows that may exist: those are upserted).
        """
        archive = self._session_archive(tenant, namespace) if self._exclusive else None
        if archive is None:
            return set()
        with self._cache_lock:
            return set(ids) - archive.by_id.keys()

    def _session_archive(self, tenant: str, namespace: Namespace) -> SessionArchive | None:
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._cache_lock:
            archive = _recent(self._archives, key)
            if archive is not None:
                return archive
            epoch = self._archive_epoch
        where = session_filter(tenant, namespace).and_(Filter('kind == "turn"'))
        index = self._local_index(tenant, namespace)
        if index is not None:
            archive = SessionArchive(index.select(where))
        else:
            rows = self.store.query(self.spec.name, where, fields=OUTPUT_FIELDS, limit=QUERY_WINDOW)
            if len(rows) >= QUERY_WINDOW:
                return None
            archive = SessionArchive(map(from_record, rows))
        with self._cache_lock:
            if epoch == self._archive_epoch:  # no archive write raced the read
                self._archives[key] = archive
                while len(self._archives) > 1 and (len(self._archives) > CACHED_ARCHIVES or sum(
                        len(kept) for kept in self._archives.values()) > CACHED_ARCHIVE_ROWS):
                    self._archives.popitem(last=False)
        return archive

    # -- reads -----------------------------------------------------------------------------

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        """Return one memory of this tenant, or None."""
        rows = self.store.query(self.spec.name, Filter("tenant == {t} and id == {id}", {"t": tenant, "id": memory_id}),
                                fields=OUTPUT_FIELDS, limit=1)
        return from_record(rows[0]) if rows else None

    def find(self, tenant: str, where: Filter, *, limit: int, offset: int = 0,
             within: Namespace | None = None) -> list[Memory]:
        """Return memories matching a filter, oldest first within the page window.

        With `within`, only rows that namespace's session can read (group_filter); with a Lite file they are
        then read from the session's in-process index.
        """
        flt = tenant_filter(tenant).and_(where)
        if within is not None:
            flt = flt.and_(group_filter(within.agent_id, within.session_id))
            index = self._local_index(tenant, within, flt)
            if index is not None:
                return sorted(index.select(flt), key=lambda m: (m.created_at, m.id))[offset: offset + limit]
        rows = self.store.query(self.spec.name, flt, fields=OUTPUT_FIELDS, limit=limit, offset=offset)
        return sorted((from_record(r) for r in rows), key=lambda m: (m.created_at, m.id))

    def page(self, tenant: str, where: Filter, *, limit: int, offset: int = 0) -> list[Memory]:
        """Return one page of matching memories in a stable order (created_at, id)."""
        flt = tenant_filter(tenant).and_(where)
        keys = self.store.query(self.spec.name, flt, fields=["id", "created_at"], limit=16384)
        keys.sort(key=lambda row: (row["created_at"], row["id"]))
        ids = [row["id"] for row in keys[offset: offset + limit]]
        if not ids:
            return []
        rows = self.store.query(self.spec.name, Filter("tenant == {pt} and id in {pids}", {"pt": tenant, "pids": ids}),
                                fields=OUTPUT_FIELDS, limit=len(ids))
        order = {memory_id: index for index, memory_id in enumerate(ids)}
        return sorted((from_record(r) for r in rows), key=lambda m: order[m.id])

    def count(self, tenant: str, where: Filter) -> int:
        """Return how many memories match a filter (up to the store's window)."""
        return len(self.store.query(self.spec.name, tenant_filter(tenant).and_(where), fields=["id"], limit=16384))

    def search(self, tenant: str, query: str, where: Filter, *, limit: int, dense_limit: int | None = None,
               text_query: str | None = None, within: Namespace | None = None,
               distinct: bool = False) -> list[Scored]:
        """Return BM25 (and dense, when configured) candidates for a query, merged by id, with their ranks.

        `text_query` (default: the query) is what BM25 searches, e.g. the query with inflections added; the
        embedder always sees the query itself. Rows BM25 scores 0 (Lite returns them anyway) get no BM25 rank.
        With `within`, only the rows that namespace's session can read are searched (group_filter); with a Lite
        file they are then searched in memory (storage/local_index.py). With `distinct`, each list holds one
        copy of a text (one_per_text): a line repeated across a session takes one place, not many.
        """
        flt = tenant_filter(tenant).and_(where)
        if within is not None:
            flt = flt.and_(group_filter(within.agent_id, within.session_id))
        if not query.strip():
            return []
        index = self._local_index(tenant, within, flt) if within is not None else None
        vector = self._query_vector(query)
        dense_flt = flt.and_(EMBEDDED) if self.flagged else flt  # rows still in the backlog: BM25 only
        text_limit, vector_limit = limit, dense_limit or limit
        if index is not None:
            text_hits = index.search_text(text_query or query, flt, text_limit, distinct=distinct)
            dense_hits = index.search_dense(vector, dense_flt, vector_limit, distinct=distinct) \
                if vector is not None else []
        else:
            fetch = DISTINCT_FETCH if distinct else 1  # copies must not leave a distinct list short
            text_hits = self._store_hits(self.store.search_text(
                self.spec.name, text_query or query, limit=min(text_limit * fetch, QUERY_WINDOW), where=flt,
                fields=OUTPUT_FIELDS))
            dense_hits = self._store_hits(self.store.search_dense(
                self.spec.name, vector, limit=min(vector_limit * fetch, QUERY_WINDOW), where=dense_flt,
                fields=OUTPUT_FIELDS)) if vector is not None else []
            if distinct:
                text_hits, dense_hits = one_per_text(text_hits, text_limit), one_per_text(dense_hits, vector_limit)
        found: dict[str, Scored] = {}
        for position, (memory, score) in enumerate(text_hits, start=1):
            found[memory.id] = Scored(memory, bm25=score, bm25_rank=position if score > 0 else None)
        for position, (memory, score) in enumerate(dense_hits, start=1):
            previous = found.get(memory.id)
            found[memory.id] = Scored(previous.memory if previous else memory, bm25=previous.bm25 if previous else 0.0,
                                      dense=score, bm25_rank=previous.bm25_rank if previous else None,
                                      dense_rank=position)
        return list(found.values())

    def _query_vector(self, query: str) -> list[float] | None:
        """Return the query's vector; None without an embedder, or when a remote one fails (BM25 answers alone)."""
        if self.embedder is None:
            return None
        try:
            return self.embedder.embed_query(query)
        except (ProviderError, ProviderTimeoutError) as error:
            log.warning("query not embedded, searching by text only: %s", error.message)
            return None

    def vectors_filled(self, tenant: str, records: list[Record]) -> None:
        """Put rows whose vectors the backlog just wrote into this process's indexes (call under write_order)."""
        if self._exclusive and records:
            with self._cache_lock:
                self._index_saved(tenant, [from_record(r) for r in records], records)

    @staticmethod
    def _store_hits(hits: list[Hit]) -> list[tuple[Memory, float]]:
        return [(from_record({"id": hit.id, **hit.record}), hit.score) for hit in hits]

    def _local_index(self, tenant: str, namespace: Namespace, where: Filter | None = None) -> LocalIndex | None:
        """Return the in-memory index of the rows a session can read, loading it on first use (Lite only).

        None against a server, when `where` uses syntax the index cannot evaluate, when the session can read
        more rows than one store query returns, or while another thread loads it: the store answers instead.
        """
        if not self._exclusive or not self._index_rows or (where is not None and not supported(where)):
            return None
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._cache_lock:
            index = _recent(self._indexes, key)
            if index is not None:
                return index
            if key in self._oversized or key in self._loading:
                return None
            has_sibling = self._sibling(key) is not None
        if has_sibling and self._sessions_with_rows(tenant, namespace.agent_id) is not None:
            with self._cache_lock:  # checked again: a write or a load may have come in between
                index = self._indexes.get(key)
                if index is None and key not in self._loading and key not in self._oversized:
                    index = self._sibling_view(key)
                if index is not None:
                    return index
        with self._cache_lock:
            if key in self._indexes or key in self._oversized or key in self._loading:
                return self._indexes.get(key)
            self._loading[key] = []
            epoch = self._epoch
        try:
            fields = OUTPUT_FIELDS + (["dense"] if self.embedder else []) + ([EMBEDDED_FIELD] if self.flagged else [])
            rows = self.store.query(self.spec.name, tenant_filter(tenant).and_(group_filter(*key[1:])),
                                    fields=fields, limit=QUERY_WINDOW)
            index = LocalIndex(self.spec.dense_dim)
            if len(rows) < QUERY_WINDOW:  # texts are tokenized by the first text search (or the background)
                for row in rows:
                    index.put(from_record(row), row, tokenize=False)
        except BaseException:
            with self._cache_lock:
                self._loading.pop(key, None)
            raise
        with self._cache_lock:  # the queue is replayed and the index installed with no write in between
            queued = self._loading.pop(key, [])
            if len(rows) >= QUERY_WINDOW:
                self._oversized.add(key)
                return None
            if epoch != self._epoch:  # a delete or a failed write raced the load
                return None
            for memory, record in queued:
                index.put(memory, record, tokenize=False)
            self._install(key, index)
        return index

    def _install(self, key: GroupKey, index: LocalIndex) -> None:
        """Keep a session's index, least recently used ones out first (called with the cache lock held)."""
        self._indexes[key] = index
        self._tokenize_later(index)
        while len(self._indexes) > 1 and (len(self._indexes) > CACHED_INDEXES or sum(
                len(kept) for kept in self._indexes.values()) > self._index_rows):
            self._indexes.popitem(last=False)

    def _sibling(self, key: GroupKey) -> LocalIndex | None:
        """Return a loaded index of another session of the same agent (called with the cache lock held)."""
        return next((index for other, index in self._indexes.items() if other[:2] == key[:2]), None)

    def _sibling_view(self, key: GroupKey) -> LocalIndex | None:
        """Return and keep the index of a session known to hold no rows of its own, built from a sibling's.

        A session reads its own rows, its agent's other-scope rows and the shared rows (group_filter); a sibling
        reads the same but for its own session rows, so those are all that is left out. Called with the cache
        lock held: no write lands between the check and the copy, and later writes reach the new index.
        """
        sessions = self._agent_sessions.get(key[:2])
        sibling = self._sibling(key)
        if sessions is None or key[2] in sessions or sibling is None:
            return None
        index = sibling.subset(lambda memory: memory.scope != "session")
        self._install(key, index)
        return index

    def _sessions_with_rows(self, tenant: str, agent_id: str) -> set[str] | None:
        """Return every session of the agent holding session-scope rows (None: more than one query returns)."""
        key = (tenant, agent_id)
        with self._cache_lock:
            known = _recent(self._agent_sessions, key)
            if known is not None:
                return known
            if key in self._agent_sessions_loading or key in self._agent_sessions_overflow:
                return None
            self._agent_sessions_loading[key] = set()
            epoch = self._epoch
        try:
            rows = self.store.query(self.spec.name, Filter(
                'tenant == {dt} and agent_id == {da} and scope == "session"', {"dt": tenant, "da": agent_id}),
                fields=["session_id"], limit=QUERY_WINDOW)
        except BaseException:
            with self._cache_lock:
                self._agent_sessions_loading.pop(key, None)
            raise
        with self._cache_lock:  # taken off the loading list and installed with no write in between
            written = self._agent_sessions_loading.pop(key, set())
            if len(rows) >= QUERY_WINDOW:  # not listed again: each new session would pay for it twice
                self._agent_sessions_overflow.add(key)
                return None
            if epoch != self._epoch:  # a delete or a failed write raced the query
                return None
            # Writes that landed during the query were recorded in `written`; earlier ones are in `rows`.
            sessions = self._agent_sessions.setdefault(key, set())
            sessions.update(written, (str(row["session_id"]) for row in rows))
            while len(self._agent_sessions) > CACHED_AGENT_SESSIONS:
                self._agent_sessions.popitem(last=False)
            return sessions


def tenant_filter(tenant: str) -> Filter:
    """Return the filter every read starts from: one tenant never sees another's rows."""
    return Filter("tenant == {tenant}", {"tenant": tenant})


def group_filter(agent_id: str, session_id: str) -> Filter:
    """Return the filter of every row a session may read: its own, its agent's other than other sessions',
    and the shared ones. Every scope_filter of that namespace selects within it."""
    return Filter('(agent_id == {ga} and (scope != "session" or session_id == {gs})) or scope == "shared"',
                  {"ga": agent_id, "gs": session_id})


def session_filter(tenant: str, namespace: Namespace) -> Filter:
    """Return the filter of one session's rows."""
    return Filter("tenant == {st} and agent_id == {sa} and session_id == {ss}",
                  {"st": tenant, "sa": namespace.agent_id, "ss": namespace.session_id})


def namespace_filter(tenant: str, agent_id: str, session_id: str | None, user_id: str | None) -> Filter:
    """Return the filter of an agent's rows, optionally narrowed to a session and/or a user."""
    flt = Filter("tenant == {nt} and agent_id == {na}", {"nt": tenant, "na": agent_id})
    if session_id:
        flt = flt.and_(Filter("session_id == {ns}", {"ns": session_id}))
    if user_id:
        flt = flt.and_(Filter("user_id == {nu}", {"nu": user_id}))
    return flt


def scope_filter(namespace: Namespace, scopes: Sequence[str] | None = None) -> Filter:
    """Return the filter of what a namespace may read: session + user + agent + shared by default."""
    wanted = [s for s in (scopes or ALL_SCOPES) if s != "user" or namespace.user_id]
    params: dict[str, Any] = {"ca": namespace.agent_id, "cs": namespace.session_id, "cu": namespace.user_id or ""}
    clauses = {
        "session": '(scope == "session" and agent_id == {ca} and session_id == {cs})',
        "user": '(scope == "user" and agent_id == {ca} and user_id == {cu})',
        "agent": '(scope == "agent" and agent_id == {ca})',
        "shared": '(scope == "shared")',
    }
    template = " or ".join(clauses[s] for s in wanted) or 'scope == "none"'
    used = {k: v for k, v in params.items() if "{" + k + "}" in template}
    return Filter(template, used)


def live_filter(include_superseded: bool) -> Filter:
    """Return the filter that hides superseded memories unless asked for."""
    return Filter("") if include_superseded else Filter("valid_to == 0")


def kinds_filter(kinds: Sequence[str] | None, *, exclude_turns: bool) -> Filter:
    """Return the filter of the kinds asked for (archived turns are excluded unless named)."""
    if kinds:
        return Filter("kind in {kinds}", {"kinds": list(kinds)})
    return Filter('kind != "turn"') if exclude_turns else Filter("")
