"""Memories over a MemoryStore: reads, writes and filters of one tenant's namespaces, monotonic time."""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from acn.common import degraded
from acn.common.errors import ProviderError, ProviderTimeoutError
from acn.common.models import Memory, Namespace
from acn.common.stored import stamp_bounds
from acn.providers.embedders import Embedder
from acn.storage.base import Filter, Hit, MemoryStore, Record
from acn.storage.lite.local_index import DISTINCT_FETCH, LocalIndex
from acn.storage.lite.read_cache import CACHED_BYTES, CACHED_INDEX_ROWS, GroupKey, ReadCache, Stamp
from acn.storage.memory_heads import MemoryHeads
from acn.storage.memory_queries import MemoryQueries, scope_key
from acn.storage.memory_rows import (
    EMBEDDED,
    EMBEDDED_FIELD,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    Scored,
    client_id,
    every_row,
    for_user_rows,
    from_record,
    group_filter,
    group_turns_user,
    group_user,
    live_filter,
    memory_spec,
    namespace_filter,
    one_per_text,
    pending_vector,
    session_filter,
    stored_id,
    stored_ids,
    tenant_filter,
    to_record,
    user_filter,
    user_group,
    with_client_id,
)
from acn.storage.sealed import RefusedStore, RowSealer, SealedStore, sealing_problem
from acn.storage.user_archive import archive_query, earlier_at, earlier_hits, has_earlier

T = TypeVar("T")
CLOCK_SESSIONS = 65_536  # sessions whose last stamp is remembered (MemoryRepository.now_ms)
SHARED_KEPT = 64  # dedup pools kept against a server (MemoryRepository.keep_shared)
log = logging.getLogger("acn.store")


class MemoryRepository(MemoryQueries):
    """Read and write memories of one tenant's namespaces; scopes decide who sees what.

    The named reads the pipelines use (standing, by_key, rolled_back_after, ...) are MemoryQueries'; the
    primitives they stand on (find, page, count, query_all, search) are here."""

    def __init__(self, store: MemoryStore, *, prefix: str, embedder: Embedder | None,
                 index_rows: int = CACHED_INDEX_ROWS, sealer: RowSealer | None = None,
                 embed_later: bool = False, cache_bytes: int = CACHED_BYTES, warm_in_background: bool = True,
                 inline_rows: int = 0, member_pages: bool = True) -> None:
        self.embedder = embedder
        # embed_later: rows are written with pending_vector() and EMBEDDED 0, and on_pending hears of them (the
        # backlog worker embeds them); write_order keeps each save and each vector fill whole, in store order.
        self.embed_later = embed_later and embedder is not None
        # With embed_later, a save of up to inline_rows rows is still embedded at once (a cheap embedder's small
        # calls: see providers.embedding_setup.inline_rows).
        self.inline_rows = inline_rows
        self.flagged = embedder is not None
        self.created = False  # open(): this start created the collection (see acn/storage/carry_over.py)
        self.on_pending: Callable[[str, list[tuple[str, str]]], None] | None = None
        self.write_order = threading.RLock()
        self._prefix = prefix
        # With a sealer (ACN_ENCRYPTION_KEY) rows are encrypted at rest: the store wrapper seals and opens them,
        # so everything here, the in-process index included, works on plain rows.
        self.sealer = sealer
        self.spec = memory_spec(prefix, embedder.dim if embedder else 0, sealed=sealer is not None)
        self._twin = memory_spec(prefix, embedder.dim if embedder else 0, sealed=sealer is None)
        # The store's secret (acn/storage/store_facts.py), for deterministic ids another tenant cannot predict;
        # Runtime.open sets it (a repository built without one, in tests, keys with a fixed one).
        self.secret = b"acn unkeyed repository"
        self._raw_store = store
        self.store: MemoryStore = SealedStore(store, sealer, {self.spec.name}) if sealer else store
        self._clock_lock = threading.Lock()
        # Per session, the last stamp handed out (least recently used sessions forgotten past CLOCK_SESSIONS: a
        # forgotten session's next stamp reads the store again); per agent, the lock of its read-then-write
        # sequences, kept only while someone holds it. Neither grows with every session and agent ever seen.
        self._last_ms: OrderedDict[tuple[str, str, str], int] = OrderedDict()
        self._shared_kept: OrderedDict[Hashable, Any] = OrderedDict()  # see take_shared
        self._namespace_locks: weakref.WeakValueDictionary[tuple[str, str], threading.RLock] = \
            weakref.WeakValueDictionary()
        # With a Lite file this process is the only writer: repeated reads are served from memory and kept
        # current by the writes themselves (acn/storage/lite/read_cache.py). Against a server other processes write too:
        # no cache there.
        exclusive = not getattr(store, "is_server", True)
        self.warming: threading.Thread | None = None  # the start-up search (open); Runtime.open waits for it
        # No search of the store yet (a Lite file with in-process indexes: see open() and _local_index).
        self.store_cold = exclusive
        self.existed = False  # open(): the memories collection was there already (rows may need warming)
        self.cache = ReadCache(self._query, dense_dim=self.spec.dense_dim, index_rows=index_rows,
                               max_bytes=cache_bytes, background=warm_in_background) if exclusive else None
        # What a session needs of its own rows, by primary key: no read scans the collection for a new session.
        # member_pages=False: no session is loaded by id (what a process that is one of several writers does).
        self.heads = MemoryHeads(self._raw_store, prefix=prefix, exclusive=exclusive, pages=member_pages)
        self._heads_background = warm_in_background
        self.heads.write_order = self.write_order
        if self.cache is not None:
            self.cache.known_empty = self._group_known_empty
            self.cache.member_ids = self._group_member_ids

    def _group_known_empty(self, key: GroupKey) -> bool:
        user, archive = group_user(key[2]), group_turns_user(key[2])
        if user is not None:
            return self.heads.user_empty(key[0], key[1], user)
        if archive is not None:
            return self.heads.user_empty(key[0], key[1], archive, "turns")
        return self.heads.readable_empty(key[0], Namespace(agent_id=key[1], session_id=key[2]))

    def _group_member_ids(self, key: GroupKey) -> list[str] | None:
        user, archive = group_user(key[2]), group_turns_user(key[2])
        if user is not None:
            return self.heads.user_member_ids(key[0], key[1], user)
        if archive is not None:
            return self.heads.user_member_ids(key[0], key[1], archive, "turns")
        return self.heads.member_ids(key[0], Namespace(agent_id=key[1], session_id=key[2]))

    def earlier_at(self, tenant: str, namespace: Namespace, places: Sequence[tuple[str, int]]) -> list[Memory] | None:
        """Return the user's archived messages at these (session id, turn) places of their conversations, from the
        index of their archive (None: not held): see acn/storage/user_archive.py."""
        return earlier_at(self, tenant, namespace, places)

    @property
    def raw_store(self) -> MemoryStore:
        """Return the store under the encryption wrapper (rows as stored)."""
        return self._raw_store

    @property
    def prefix(self) -> str:
        return self._prefix

    def query_range(self, store: MemoryStore, where: Filter, fields: list[str], collection: str) -> list[Record]:
        """Return every row of a memories collection that matches (see query_all), read from `store`."""
        return self._query_range(store, where, fields, "", None, collection)

    def forget_cached(self) -> None:
        """Drop what the read cache holds (rows were written behind its back: acn/storage/carry_over.py)."""
        self._forget_all()

    def _query(self, where: Filter, fields: list[str], limit: int) -> list[Record]:
        # self.store, not a bound method kept by the cache: open() may replace the store (RefusedStore).
        return self.store.query(self.spec.name, where, fields=fields, limit=limit)

    def namespace_lock(self, tenant: str, namespace: Namespace) -> threading.RLock:
        """Return the lock that serialises read-then-write sequences of one agent's memories."""
        key = (tenant, namespace.agent_id)
        with self._clock_lock:
            lock = self._namespace_locks.get(key)
            if lock is None:
                lock = self._namespace_locks[key] = threading.RLock()
            return lock

    def open(self) -> None:
        """Create and load the collection.

        Memories written with the other key setting, or with another key, are refused: every read and write then
        answers encryption_key_error (the server still starts, as with encrypted session snapshots).
        """
        existed = self.existed = self._raw_store.exists(self.spec.name)
        # A new collection beside memories written under another embedder: see acn/storage/carry_over.py.
        self.created = not existed
        self.store.ensure(self.spec)
        names = self.store.field_names(self.spec.name) if self.flagged else None
        if names is not None and EMBEDDED_FIELD not in names:
            # Written before rows could wait for vectors (no flag field): embed on the request path, as then.
            log.warning("collection %s has no %s field: rows are embedded as they are written",
                        self.spec.name, EMBEDDED_FIELD)
            self.flagged = self.embed_later = False
            self.spec = memory_spec(self._prefix, self.spec.dense_dim, sealed=self.sealer is not None, flagged=False)
        if self.flagged and self.cache is not None:
            self.cache.extra_fields = [EMBEDDED_FIELD]
        problem = sealing_problem(self._raw_store, self.spec, self._twin, self.sealer)
        if problem is not None:
            log.error("memories refused: %s", problem.message)
            self.store = RefusedStore(self.store, problem)
            return
        self.heads.open(memories_existed=existed, background=self._heads_background,
                        scan=lambda fields: self._query_range(self.store, Filter(""), fields, "", None))
        # A Lite file builds its search structures over every row on the first search after it opens (3 s at
        # 100k rows, ~1.5 KB of memory a row: +440 MB at 300k, bench/results/scale-bigns.md). With in-process
        # indexes no request needs them (a session's searches are answered from its index, a read of a session
        # whose index loads waits for the load while the store is cold: _local_index), so none is made: the
        # memory a restarted process holds is what it held before. Without them, one search now, off the request
        # path, so that the first request does not pay for it.
        if self.cache is not None and self.cache.indexes_rows:
            return
        self.store_cold = False
        self.warming = threading.Thread(target=self._warm_store, name="acn-store-warm", daemon=True)
        self.warming.start()

    def _warm_store(self) -> None:
        try:
            self.store.search_text(self.spec.name, "warm", limit=1, where=tenant_filter("-"), fields=["id"])
        except Exception as error:  # only a warm-up: the first request reports any real problem itself
            log.debug("store warm-up search failed: %s", error)

    @property
    def sealed_collection(self) -> str:
        """Return the name of the encrypted memories collection (this one or its twin)."""
        return self.spec.name if self.sealer is not None else self._twin.name

    def digest(self, text: str) -> str:
        """Return a hex digest of text for ids derived from content, keyed: with the encryption key's derived key
        when rows are encrypted at rest (a plain hash would let anyone holding the files confirm a guessed
        message), else with the store's secret (a plain hash let another tenant predict archive ids)."""
        if self.sealer is not None:
            return self.sealer.digest(text)
        return hmac.new(self.secret, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    # -- time ------------------------------------------------------------------------------

    def now_ms(self, tenant: str, namespace: Namespace) -> int:
        """Return UTC epoch ms, strictly increasing within one session (so "newest" and supersede order are total)."""
        key = (tenant, namespace.agent_id, namespace.session_id)
        with self._clock_lock:
            known = key in self._last_ms
        if not known:  # read outside the lock: a new session's first read must not hold up the others
            latest = self._latest_in_session(tenant, namespace)
            with self._clock_lock:
                self._last_ms[key] = max(self._last_ms.get(key, 0), latest)
        with self._clock_lock:
            now = max(int(time.time() * 1000), self._last_ms.get(key, 0) + 1)
            self._last_ms[key] = now
            self._last_ms.move_to_end(key)
            while len(self._last_ms) > CLOCK_SESSIONS:
                self._last_ms.popitem(last=False)
            return now

    def _latest_in_session(self, tenant: str, namespace: Namespace) -> int:
        """Return the latest stamp of the session's rows that is not behind the wall clock (0: none).

        Only those can push the session's clock past the wall clock (a batch stamps items faster than one per ms;
        a clock set back), so they are all that is read: a few rows, not the session (a whole-session read cost
        a second at 10k rows).
        """
        high = self.heads.session_high(tenant, namespace)  # by primary key (None: heads still being built)
        wall = int(time.time() * 1000)
        if high is not None and high <= stamp_bounds(wall)[1]:  # a mark an older process left out of range: scan
            return high
        # A stamp beyond the stored-row bound (acn/common/stored.py) is not a clock: following it, the next stamp
        # overflowed the store's int64 and every later write of the session failed. Such a row is skipped.
        ahead = session_filter(tenant, namespace).and_(Filter(
            "updated_at >= {clock_wall} and updated_at <= {clock_limit}",
            {"clock_wall": wall, "clock_limit": stamp_bounds(wall)[1]}))
        rows = self.store.query(self.spec.name, ahead, fields=["updated_at"], limit=QUERY_WINDOW)
        return max((int(row["updated_at"]) for row in rows), default=0)

    def readable_empty(self, tenant: str, namespace: Namespace) -> bool:
        return self.heads.readable_empty(tenant, namespace)

    def rows_held(self, tenant: str, namespace: Namespace, where: Filter, fields: list[str]) -> list[Record] | None:
        # A Lite file: the session's index, once loaded (or known empty from the start), holds every row it can
        # read, kept current by the writes: no scan for the write path's dedup pool.
        flt = tenant_filter(tenant).and_(where).and_(group_filter(namespace.agent_id, namespace.session_id))
        indexes = self._held_indexes(tenant, namespace, flt)
        if indexes is None:
            return None
        return [record for index, where_here in each(indexes, flt)
                for record in index.records(where_here, fields)]  # as query_all answers them

    # -- writes ----------------------------------------------------------------------------

    def save(self, tenant: str, memories: list[Memory], *, new_ids: set[str] | None = None) -> None:
        """Insert or replace memories (embedding them when an embedder is configured).

        Ids in new_ids are known not to exist yet and are inserted without the upsert's lookup.
        """
        vectors: list[list[float] | None] = [None] * len(memories)
        later = self.embed_later and len(memories) > self.inline_rows
        if self.embedder and memories and not later:
            vectors = list(self.embedder.embed_batch([m.content for m in memories]))
        records = [to_record(m, tenant, v) for m, v in zip(memories, vectors, strict=True)]
        if self.flagged:
            for record in records:
                record[EMBEDDED_FIELD] = int("dense" in record)
                record.setdefault("dense", pending_vector(self.spec.dense_dim))
        fresh = new_ids or set()
        with self.write_order:
            try:
                self.heads.note_save(tenant, memories)  # before the rows: no head, no row (memory_heads.py)
                self.store.insert(self.spec.name, [r for m, r in zip(memories, records, strict=True) if m.id in fresh])
                self.store.upsert(self.spec.name,
                                  [r for m, r in zip(memories, records, strict=True) if m.id not in fresh])
            except BaseException:
                self._forget_all()  # part of the batch may have landed: nothing cached can be trusted
                raise
            self._after_save(tenant, memories, records, fresh)
        if later and memories and self.on_pending is not None:
            self.on_pending(tenant, [(m.id, m.content) for m in memories])

    def delete_ids(self, tenant: str, ids: list[str]) -> None:
        """Delete memories by id within a tenant."""
        if ids:
            # An id this tenant's tag scopes names the tenant's row alone: deleted by primary key (`id in` with any
            # other clause makes Milvus Lite scan the whole collection). An id taken as given (a legacy or an
            # over-long one, or one naming a scope itself) keeps the tenant clause.
            given = stored_ids(tenant, [i for i in ids if stored_id(tenant, i) == i])
            scoped = stored_ids(tenant, [i for i in ids if stored_id(tenant, i) != i])
            try:
                if scoped:
                    self.store.delete(self.spec.name, Filter("id in {ids}", {"ids": scoped}))
                if given:
                    self.store.delete(self.spec.name, Filter("tenant == {t} and id in {ids}",
                                                             {"t": tenant, "ids": given}))
            finally:
                self._forget_all()

    def delete_turns_after(self, tenant: str, namespace: Namespace, turn: int) -> None:
        """Delete the session's archived messages of turns after `turn`: what a request killed between its archive
        write and its commit left (never acknowledged; the next turn would otherwise share their number)."""
        where = session_filter(tenant, namespace).and_(
            Filter('kind == "turn" and scope == "session" and turn_from > {left_after}', {"left_after": turn}))
        try:
            self.store.delete(self.spec.name, where)
        finally:
            self._forget_all()

    def delete_namespace(self, tenant: str, agent_id: str, session_id: str | None, user_id: str | None) -> None:
        """Delete every memory of an agent, optionally narrowed to one session or one user."""
        try:
            self.store.delete(self.spec.name, namespace_filter(tenant, agent_id, session_id, user_id))
        finally:
            self._forget_all()

    def delete_user(self, tenant: str, user_id: str, agent_id: str | None) -> None:
        """Delete every row written with this user_id, in every conversation (of one agent, or of every agent)."""
        try:
            self.store.delete(self.spec.name, tenant_filter(tenant).and_(user_filter(user_id, agent_id)))
        finally:
            self._forget_all()

    # -- what the read cache adds (Lite only) ------------------------------------------------

    def _after_save(self, tenant: str, memories: list[Memory], records: list[Record], fresh: set[str]) -> None:
        if self.cache is not None:
            self.cache.after_save(tenant, memories, records, fresh)

    def vectors_filled(self, tenant: str, records: list[Record]) -> None:
        """Put rows whose vectors the backlog just wrote into the read cache (call under write_order)."""
        if self.cache is not None and records:
            self.cache.vectors_filled(tenant, [from_record(r) for r in records], records)

    def _forget_all(self) -> None:
        with self._clock_lock:
            self._shared_kept.clear()
        if self.cache is not None:
            self.cache.forget_all()

    def _local_index(self, tenant: str, namespace: Namespace, where: Filter | None = None, *,
                     searching: bool = False) -> LocalIndex | None:
        """Return the session's in-process index (Lite), or None: the store answers.

        While this process has not searched the store (Lite's search structures not built: open()), a search whose
        index loads in the background waits for the load instead: answering it from the store would build those
        structures over every row, for one call (bounded: PREWARM_WAIT). Other reads (a dedup pool's rows, a
        filtered list) are answered by a query meanwhile, as before: a query builds nothing.
        """
        if self.cache is None:
            return None
        index = self.cache.local_index(tenant, namespace, where)
        if index is None and searching and self.store_cold and \
                self.cache.wait_loaded((tenant, namespace.agent_id, namespace.session_id)):
            index = self.cache.local_index(tenant, namespace, where)
        return index

    def _held_indexes(self, tenant: str, namespace: Namespace, where: Filter | None = None, *,
                      searching: bool = False) -> list[LocalIndex] | None:
        """Return the in-process indexes of what a namespace reads (Lite): its session's and, with a user_id, its
        user's (held once for every conversation of the user: a new conversation reads no row of the user's);
        None while either is not held (the store answers)."""
        index = self._local_index(tenant, namespace, where, searching=searching)
        if index is None or not namespace.user_id or self.cache is None:
            return None if index is None else [index]
        key = (tenant, namespace.agent_id, user_group(namespace.user_id))
        users = self.cache.group_index(key, where)
        if users is None and searching and self.store_cold and self.cache.wait_loaded(key):
            users = self.cache.group_index(key, where)
        return None if users is None else [index, users]

    def stamp(self, tenant: str, agent_id: str) -> Stamp:
        """Return the write counters an agent's memories depend on: (epoch, agent's writes, shared writes)."""
        return self.cache.stamp(tenant, agent_id) if self.cache is not None else (0, 0, 0)

    def park(self, tenant: str, agent_id: str, key: Hashable, value: Any, stamp: Stamp) -> None:
        """Keep an object built from an agent's memories as of `stamp` (e.g. a batch writer's dedup index).

        `unpark` hands it back only while nothing it depends on was written since; against a server nothing
        is kept.
        """
        if self.cache is not None:
            self.cache.park(tenant, agent_id, key, value, stamp)

    def unpark(self, tenant: str, agent_id: str, key: Hashable) -> Any | None:
        """Take back a parked object if nothing it depends on was written since it was parked (it is removed)."""
        return self.cache.unpark(tenant, agent_id, key) if self.cache is not None else None

    def take_shared(self, key: Hashable) -> Any | None:
        """Take back an object kept by keep_shared (against a server: other processes write too, so the caller
        brings it up to date itself; see memory.pool.Pool.load_shared)."""
        with self._clock_lock:
            return self._shared_kept.pop(key, None)

    def keep_shared(self, key: Hashable, value: Any) -> None:
        """Keep an object for take_shared (the SHARED_KEPT most recent; a delete in this process drops them all)."""
        with self._clock_lock:
            self._shared_kept[key] = value
            self._shared_kept.move_to_end(key)
            while len(self._shared_kept) > SHARED_KEPT:
                self._shared_kept.popitem(last=False)

    def standing(self, tenant: str, namespace: Namespace, kinds: Sequence[str], *, limit: int) -> list[Memory]:
        """Return the namespace's live memories of these kinds (see MemoryQueries.standing); with a Lite file kept
        until the agent or the shared scope writes a memory (ReadCache.agent_view): every assemble reads them, and
        at 10k memories in one namespace testing and sorting the rows took ~7 % of a call (~21 % BM25 only). Against a
        server another replica may write at any time unseen here: read every call."""
        def read() -> list[Memory]:
            return super(MemoryRepository, self).standing(tenant, namespace, kinds, limit=limit)
        if self.cache is None or "turn" in kinds:  # archived messages do not bump the agent's stamp
            return read()
        key = ("standing", tenant, self._reader_key(tenant, namespace), tuple(kinds), limit)
        return list(self.cache.agent_view(tenant, namespace.agent_id, key, read))

    def superseded_key(self, tenant: str, namespace: Namespace) -> Hashable:
        return ("superseded_in", tenant, self._reader_key(tenant, namespace))

    def _reader_key(self, tenant: str, namespace: Namespace) -> Hashable:
        """Return what a namespace's reads depend on: its scopes, but a conversation with no row of its own (a
        returning user's new one) reads exactly what every other such conversation of the user reads, so they share
        one key (a view computed for one serves the next: no pass over the user's rows per new conversation)."""
        if self.heads.session_empty(tenant, namespace):
            return ("rowless", namespace.agent_id, namespace.user_id or "")
        return scope_key(namespace)

    def view(self, key: Hashable, compute: Callable[[], T]) -> T:
        """Return compute(), remembered until a write that could change it (supersede, update, delete).

        Only for views that inserting brand-new memories cannot change, such as "which values were superseded".
        """
        return self.cache.view(key, compute) if self.cache is not None else compute()

    def archived_messages(self, tenant: str, namespace: Namespace, turns: Sequence[int]) -> list[Memory]:
        """Return the session's live archived messages of the given turn numbers, in stored order."""
        wanted = set(turns)
        if not wanted:
            return []
        cached = self.cache.archived_messages(tenant, namespace, wanted) if self.cache is not None else None
        if cached is not None:
            return cached
        if self.heads.session_empty(tenant, namespace):
            return []
        where = (session_filter(tenant, namespace).and_(live_filter(False))
                 .and_(Filter('scope == "session" and kind == "turn" and turn_from in {near}',
                              {"near": sorted(wanted)})))
        rows = self.store.query(self.spec.name, where, fields=OUTPUT_FIELDS, limit=QUERY_WINDOW)
        return sorted((from_record(r) for r in rows), key=lambda m: (m.created_at, m.id))

    def absent_archive_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str]) -> set[str]:
        """Return the ids among `ids` that the session's archive certainly does not hold (Lite only).

        Those can be inserted; the rest must be upserted. Inserting skips the upsert's primary-key lookup,
        whose cost grows with the collection (a retried turn rewrites rows that may exist: those are upserted).
        """
        return self.cache.absent_archive_ids(tenant, namespace, ids) if self.cache is not None else set()

    # -- reads -----------------------------------------------------------------------------

    def get_many(self, tenant: str, ids: Sequence[str]) -> list[Memory]:
        """Return the memories of this tenant with these ids, in one query."""
        return [from_record(row) for row in self.rows_by_id(tenant, ids, OUTPUT_FIELDS)]

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        """Return one memory of this tenant, or None."""
        rows = self.rows_by_id(tenant, [memory_id], OUTPUT_FIELDS)
        return from_record(rows[0]) if rows else None

    def rows_by_id(self, tenant: str, ids: Sequence[str], fields: list[str]) -> list[Record]:
        """Return the rows of this tenant with these ids (as the client knows them), by a primary-key lookup."""
        return [with_client_id(row) for row in self.rows_by_key(tenant, stored_ids(tenant, ids), fields)]

    def rows_by_key(self, tenant: str, keys: Sequence[str], fields: list[str]) -> list[Record]:
        """Return the rows of this tenant with these primary keys (their ids stay keys).

        The filter is `id in [...]` alone and the tenant is checked here: Milvus Lite answers that from its
        primary-key index (~2 ms at 100k rows), while any other clause, `tenant == …` or `id == …` included, makes
        it scan the collection (~0.4 s at 100k rows, bench/results/namespace.md).
        """
        wanted = sorted(set(keys))
        if not wanted:
            return []
        read = fields if "tenant" in fields else [*fields, "tenant"]
        rows = self.store.query(self.spec.name, Filter("id in {pk_ids}", {"pk_ids": wanted}), fields=read,
                                limit=len(wanted))
        return [row for row in rows if row["tenant"] == tenant]

    def find(self, tenant: str, where: Filter, *, limit: int, offset: int = 0,
             within: Namespace | None = None) -> list[Memory]:
        """Return memories matching a filter, oldest first within the page window.

        With `within`, only rows that namespace's session can read (group_filter); with a Lite file they are
        then read from the session's in-process index.
        """
        flt = tenant_filter(tenant).and_(where)
        if within is not None:
            flt = flt.and_(group_filter(within.agent_id, within.session_id))
            indexes = self._held_indexes(tenant, within, flt)
            if indexes is not None:
                if len(indexes) == 1:
                    return indexes[0].select_page(flt, offset=offset, limit=limit)
                merged = [m for index, where_here in each(indexes, flt)
                          for m in index.select_page(where_here, offset=0, limit=offset + limit)]
                return sorted(merged, key=lambda m: (m.created_at, m.id))[offset: offset + limit]
            if self.readable_empty(tenant, within):
                return []
        rows = self.store.query(self.spec.name, flt, fields=OUTPUT_FIELDS, limit=limit, offset=offset)
        return sorted((from_record(r) for r in rows), key=lambda m: (m.created_at, m.id))

    def query_all(self, tenant: str, where: Filter, fields: list[str]) -> list[Record]:
        """Return every row matching the filter, however many: past the store's query window (16,384 rows, and
        limit + offset no more), the id space is cut into ranges at ids the full window returned, each range read
        alone and cut again while it still fills a window."""
        return [with_client_id(row) for row in self._query_range(self.store, tenant_filter(tenant).and_(where),
                                                                  fields, "", None)]

    def _query_range(self, store: MemoryStore, where: Filter, fields: list[str], low: str,
                     high: str | None, collection: str | None = None) -> list[Record]:
        return every_row(store, collection or self.spec.name, where, fields, low, high)

    def scope_legacy_ids(self, batch: int = 500) -> int:
        """Give rows stored before ids were scoped by tenant their scoped primary key; return how many moved.

        Rows are copied as stored (sealed ones stay sealed, vectors and flags kept), then the old ones deleted: a
        start that dies in between leaves both copies, and the next start deletes the old one (the copy is an
        upsert of the same key). Reads no other tenant's rows into any answer: it runs before the server serves.
        """
        raw = self._raw_store
        keys = [str(row["id"]) for row in self._query_range(raw, Filter(""), ["id", "tenant"], "", None)
                if stored_id(str(row["tenant"]), str(row["id"])) != str(row["id"])]
        if not keys:
            return 0
        fields = sorted((raw.field_names(self.spec.name) or set(OUTPUT_FIELDS)) - {"sparse"})
        for start in range(0, len(keys), batch):
            part = keys[start:start + batch]
            rows = raw.query(self.spec.name, Filter("id in {legacy}", {"legacy": part}), fields=fields,
                             limit=len(part))
            raw.upsert(self.spec.name, [{**row, "id": stored_id(str(row["tenant"]), str(row["id"]))} for row in rows])
            raw.delete(self.spec.name, Filter("id in {legacy}", {"legacy": part}))
        self._forget_all()
        log.info("ids scoped by tenant: %d rows moved to their scoped keys", len(keys))
        return len(keys)

    def page(self, tenant: str, where: Filter, *, limit: int, offset: int = 0) -> list[Memory]:
        """Return one page of matching memories in a stable order (created_at, id)."""
        flt = tenant_filter(tenant).and_(where)
        keys = self.store.query(self.spec.name, flt, fields=["id", "created_at"], limit=16384)
        keys.sort(key=lambda row: (row["created_at"], client_id(row["id"])))  # the order clients always saw
        ids = [row["id"] for row in keys[offset: offset + limit]]
        if not ids:
            return []
        rows = self.store.query(self.spec.name, Filter("tenant == {pt} and id in {pids}", {"pt": tenant, "pids": ids}),
                                fields=OUTPUT_FIELDS, limit=len(ids))
        order = {client_id(key): index for index, key in enumerate(ids)}
        return sorted((from_record(r) for r in rows), key=lambda m: order[m.id])

    def new_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str]) -> set[str]:
        """Return the ids among `ids` that no row of this tenant holds yet: the Lite cache's answer when there is
        one (certain, no query), else one query of the store."""
        if self.cache is not None or not ids:
            return self.absent_archive_ids(tenant, namespace, ids)
        return set(ids) - {str(row["id"]) for row in self.rows_by_id(tenant, ids, ["id"])}

    def tenant_lock(self, tenant: str) -> threading.RLock:
        """Return the lock that serialises a tenant's imports (its read of what exists, then its write)."""
        key = (tenant, "")  # no agent id is empty: never an agent's lock
        with self._clock_lock:
            lock = self._namespace_locks.get(key)
            if lock is None:
                lock = self._namespace_locks[key] = threading.RLock()
            return lock

    def tenant_rows(self, tenant: str, fields: list[str], *, limit: int) -> list[Record]:
        """Return up to `limit` rows (these fields) of a whole tenant, for the inspector's overview."""
        return self.store.query(self.spec.name, tenant_filter(tenant), fields=fields, limit=limit)

    def count(self, tenant: str, where: Filter) -> int:
        """Return how many memories match a filter (up to the store's window)."""
        return len(self.store.query(self.spec.name, tenant_filter(tenant).and_(where), fields=["id"], limit=16384))

    def search(self, tenant: str, query: str, where: Filter, *, limit: int, dense_limit: int | None = None,
               text_query: str | None = None, within: Namespace | None = None,
               distinct: bool = False, earlier: bool = False) -> list[Scored]:
        """Return BM25 (and dense, when configured) candidates for a query, merged by id, with their ranks.

        `text_query` (default: the query) is what BM25 searches, e.g. the query with inflections added; the
        embedder always sees the query itself. Rows BM25 scores 0 (Lite returns them anyway) get no BM25 rank.
        With `within`, only the rows that namespace's session can read are searched (group_filter); with a Lite
        file they are then searched in memory (acn/storage/lite/local_index.py). With `distinct`, each list holds one
        copy of a text (one_per_text): a line repeated across a session takes one place, not many. With
        `earlier` and a user, the user's archived messages of their other conversations are candidates too
        (acn/storage/user_archive.py), merged into the same lists.
        """
        flt = tenant_filter(tenant).and_(where)
        if within is not None:
            flt = flt.and_(group_filter(within.agent_id, within.session_id))
        if not query.strip():
            return []
        indexes = self._held_indexes(tenant, within, flt, searching=True) if within is not None else None
        earlier = earlier and within is not None and has_earlier(self, tenant, within)
        nothing_own = indexes is None and within is not None and self.readable_empty(tenant, within)
        if nothing_own and not earlier:
            return []
        vector = self._query_vector(query)
        dense_flt = flt.and_(EMBEDDED) if self.flagged else flt  # rows still in the backlog: BM25 only
        text_limit, vector_limit = limit, dense_limit or limit
        text = text_query or query
        text_hits, dense_hits = [], []
        if indexes is not None:
            # The user's index (the second) by the input's content words, as their archive (user_archive.py).
            text_hits = merged_hits([index.search_text(text if at == 0 else archive_query(text), where_here,
                                                       text_limit, distinct=distinct)
                                     for at, (index, where_here) in enumerate(each(indexes, flt))], text_limit,
                                    distinct)
            dense_hits = merged_hits([index.search_dense(vector, where_here, vector_limit, distinct=distinct)
                                      for index, where_here in each(indexes, dense_flt)],
                                     vector_limit, distinct) if vector is not None else []
        elif not nothing_own:
            self.store_cold = False  # Lite's search structures are built by this search: later loads need not wait
            fetch = DISTINCT_FETCH if distinct else 1  # copies must not leave a distinct list short
            text_hits = self._store_hits(self.store.search_text(
                self.spec.name, text_query or query, limit=min(text_limit * fetch, QUERY_WINDOW), where=flt,
                fields=OUTPUT_FIELDS))
            dense_hits = self._store_hits(self.store.search_dense(
                self.spec.name, vector, limit=min(vector_limit * fetch, QUERY_WINDOW), where=dense_flt,
                fields=OUTPUT_FIELDS)) if vector is not None else []
            if distinct:
                text_hits, dense_hits = one_per_text(text_hits, text_limit), one_per_text(dense_hits, vector_limit)
        if earlier and within is not None:  # ranked with the conversation's own (issue 48)
            more_text, more_dense = earlier_hits(self, tenant, within, text_query or query, vector,
                                                 (text_limit, vector_limit), distinct)
            text_hits = merged_hits([text_hits, more_text], text_limit, distinct)
            dense_hits = merged_hits([dense_hits, more_dense], vector_limit, distinct)
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
            degraded.note("dense")
            return None

    @staticmethod
    def _store_hits(hits: list[Hit]) -> list[tuple[Memory, float]]:
        return [(from_record({"id": hit.id, **hit.record}), hit.score) for hit in hits]


def each(indexes: list[LocalIndex], where: Filter) -> list[tuple[LocalIndex, Filter]]:
    """Return each held index with the filter it evaluates: the session's as given, the user's (the second) with the
    session ids blanked (memory_rows.for_user_rows: its answers are kept across the user's conversations)."""
    return [(index, where if position == 0 else for_user_rows(where)) for position, index in enumerate(indexes)]


def merged_hits(lists: list[list[tuple[Memory, float]]], limit: int, distinct: bool) -> list[tuple[Memory, float]]:
    """Return the hits of several indexes (a session's and its user's) as one list, best first, at most `limit`
    (one per text when `distinct`). One list is returned as it is: a namespace without a user ranks as before."""
    if len(lists) == 1:
        return lists[0]
    hits = sorted((hit for hits in lists for hit in hits), key=lambda hit: -hit[1])
    return one_per_text(hits, limit) if distinct else hits[:limit]
