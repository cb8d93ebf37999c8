"""Memories over a MemoryStore: reads, writes and filters of one tenant's namespaces, monotonic time."""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
import time
from collections.abc import Callable, Sequence
from functools import partial

from acn.common import degraded
from acn.common.errors import ProviderError, ProviderTimeoutError
from acn.common.models import Memory, Namespace
from acn.common.stored import stamp_bounds
from acn.providers.embedders import Embedder
from acn.storage.database import (
    CACHED_BYTES,
    CACHED_INDEX_ROWS,
    DISTINCT_FETCH,
    EMBEDDED,
    EMBEDDED_FIELD,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    Filter,
    HeldIndexes,
    Kept,
    MemoryStore,
    ReadCache,
    Record,
    RefusedStore,
    RowSealer,
    Scored,
    SealedStore,
    every_row,
    from_record,
    group_filter,
    held_page,
    held_search,
    lite_stored_rows,
    live_filter,
    memory_spec,
    namespace_filter,
    one_per_text,
    pending_vector,
    sealing_problem,
    session_filter,
    stored_id,
    stored_ids,
    tenant_filter,
    to_record,
    user_filter,
    with_client_id,
)
from acn.storage.repositories.clock import NamespaceLocks, SessionClock
from acn.storage.repositories.head_groups import group_known_empty, group_member_ids
from acn.storage.repositories.memory_heads import MemoryHeads
from acn.storage.repositories.memory_queries import MemoryQueries
from acn.storage.repositories.user_archive import archive_query, as_hits, has_earlier, with_earlier

log = logging.getLogger("acn.store")


class MemoryRepository:
    """Read and write memories of one tenant's namespaces; scopes decide who sees what.

    The primitives (find, count, query_all, search, the writes) are here; the named reads the pipelines ask
    (standing, by_key, rolled_back_after, ...) are `queries` (MemoryQueries, over these primitives); what is kept in
    process between calls (parked dedup pools, remembered views) is `kept` (the database room's Kept)."""

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
        self.created = False  # open(): this start created the collection (see acn/storage/repositories/row_moves.py)
        self.on_pending: Callable[[str, list[tuple[str, str]]], None] | None = None
        self.write_order = threading.RLock()
        self.prefix = prefix  # the collections' name prefix (row_moves.py names the other memories collections)
        # With a sealer (ACN_ENCRYPTION_KEY) rows are encrypted at rest: the store wrapper seals and opens them,
        # so everything here, the in-process index included, works on plain rows.
        self.sealer = sealer
        self.spec = memory_spec(prefix, embedder.dim if embedder else 0, sealed=sealer is not None)
        self._twin = memory_spec(prefix, embedder.dim if embedder else 0, sealed=sealer is None)
        # The name of the encrypted memories collection (this one or its twin).
        self.sealed_collection = self.spec.name if sealer is not None else self._twin.name
        # The store's secret (acn/storage/database/store_facts.py), for deterministic ids another tenant cannot predict;
        # Runtime.open sets it (a repository built without one, in tests, keys with a fixed one).
        self.secret = b"acn unkeyed repository"
        self.raw_store = store  # the store under the encryption wrapper (rows as stored)
        self.store: MemoryStore = SealedStore(store, sealer, {self.spec.name}) if sealer else store
        self._clock = SessionClock(self._latest_in_session)
        self._locks = NamespaceLocks()
        # With a Lite file this process is the only writer: repeated reads are served from memory and kept
        # current by the writes themselves (acn/storage/database/lite/read_cache.py). Against a server other processes
        # write too: no cache there.
        exclusive = not getattr(store, "is_server", True)
        self.warming: threading.Thread | None = None  # the start-up search (open); Runtime.open waits for it
        # No search of the store yet (a Lite file with in-process indexes: see open() and HeldIndexes.of).
        self.store_cold = exclusive
        self.existed = False  # open(): the memories collection was there already (rows may need warming)
        self.cache = ReadCache(self._query, dense_dim=self.spec.dense_dim, index_rows=index_rows,
                               max_bytes=cache_bytes, background=warm_in_background) if exclusive else None
        # What a session needs of its own rows, by primary key: no read scans the collection for a new session.
        # member_pages=False: no session is loaded by id (what a process that is one of several writers does).
        self.heads = MemoryHeads(self.raw_store, prefix=prefix, exclusive=exclusive, pages=member_pages)
        self._heads_background = warm_in_background
        self.heads.write_order = self.write_order
        if self.cache is not None:
            self.cache.known_empty = partial(group_known_empty, self.heads)
            self.cache.member_ids = partial(group_member_ids, self.heads)
            self.cache.stored_rows = lambda: lite_stored_rows(str(getattr(store, "uri", "")), self.spec.name)
        # The faces beside this one: the Lite session indexes reads are answered from (None against a server), what
        # the pipelines keep between calls (Kept, so that they never hold the read cache), the named reads.
        self.held = HeldIndexes(self.cache) if self.cache is not None else None
        self.kept = Kept(self.cache)
        self.queries = MemoryQueries(self)

    def _query(self, where: Filter, fields: list[str], limit: int) -> list[Record]:
        # self.store, not a bound method kept by the cache: open() may replace the store (RefusedStore).
        return self.store.query(self.spec.name, where, fields=fields, limit=limit)

    def namespace_lock(self, tenant: str, namespace: Namespace) -> threading.RLock:
        """Return the lock that serialises read-then-write sequences of one agent's memories."""
        return self._locks.of(tenant, namespace.agent_id)

    def open(self) -> None:
        """Create and load the collection.

        Memories written with the other key setting, or with another key, are refused: every read and write then
        answers encryption_key_error (the server still starts, as with encrypted session snapshots).
        """
        existed = self.existed = self.raw_store.exists(self.spec.name)
        # A new collection beside memories written under another embedder: see acn/storage/repositories/row_moves.py.
        self.created = not existed
        self.store.ensure(self.spec)
        names = self.store.field_names(self.spec.name) if self.flagged else None
        if names is not None and EMBEDDED_FIELD not in names:
            # Written before rows could wait for vectors (no flag field): embed on the request path, as then.
            log.warning("collection %s has no %s field: rows are embedded as they are written",
                        self.spec.name, EMBEDDED_FIELD)
            self.flagged = self.embed_later = False
            self.spec = memory_spec(self.prefix, self.spec.dense_dim, sealed=self.sealer is not None, flagged=False)
        if self.flagged and self.cache is not None:
            self.cache.extra_fields = [EMBEDDED_FIELD]
        problem = sealing_problem(self.raw_store, self.spec, self._twin, self.sealer)
        if problem is not None:
            log.error("memories refused: %s", problem.message)
            self.store = RefusedStore(self.store, problem)
            return
        self.heads.open(memories_existed=existed, background=self._heads_background,
                        scan=lambda fields: every_row(self.store, self.spec.name, Filter(""), fields))
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
        return self._clock.now_ms(tenant, namespace)

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
        self.kept.forget_all()

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
        return [with_client_id(row) for row in self._rows_by_key(tenant, stored_ids(tenant, ids), fields)]

    def _rows_by_key(self, tenant: str, keys: Sequence[str], fields: list[str]) -> list[Record]:
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
            indexes = self.held.of(tenant, within, flt) if self.held is not None else None
            if indexes is not None:
                return held_page(indexes, flt, offset=offset, limit=limit)
            if self.heads.readable_empty(tenant, within):
                return []
        rows = self.store.query(self.spec.name, flt, fields=OUTPUT_FIELDS, limit=limit, offset=offset)
        return sorted((from_record(r) for r in rows), key=lambda m: (m.created_at, m.id))

    def query_all(self, tenant: str, where: Filter, fields: list[str]) -> list[Record]:
        """Return every row matching the filter, however many: past the store's query window (16,384 rows, and
        limit + offset no more), the id space is cut into ranges at ids the full window returned, each range read
        alone and cut again while it still fills a window."""
        return [with_client_id(row) for row in every_row(self.store, self.spec.name, tenant_filter(tenant).and_(where),
                                                         fields)]

    def new_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str]) -> set[str]:
        """Return the ids among `ids` that no row of this tenant holds yet: the Lite cache's answer when there is
        one (certain, no query), else one query of the store."""
        if self.cache is not None or not ids:
            return self.kept.absent_archive_ids(tenant, namespace, ids)
        return set(ids) - {str(row["id"]) for row in self.rows_by_id(tenant, ids, ["id"])}

    def tenant_lock(self, tenant: str) -> threading.RLock:
        """Return the lock that serialises a tenant's imports (its read of what exists, then its write)."""
        return self._locks.of(tenant, "")  # no agent id is empty: never an agent's lock

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
        file they are then searched in memory (acn/storage/database/lite/local_index.py). With `distinct`, each list
        holds one copy of a text (one_per_text): a line repeated across a session takes one place, not many. With
        `earlier` and a user, the user's archived messages of their other conversations are candidates too
        (user_archive.py), merged into the same lists.
        """
        flt = tenant_filter(tenant).and_(where)
        if within is not None:
            flt = flt.and_(group_filter(within.agent_id, within.session_id))
        if not query.strip():
            return []
        indexes = (self.held.of(tenant, within, flt, wait=self.store_cold)
                   if within is not None and self.held is not None else None)
        earlier = earlier and within is not None and has_earlier(self, tenant, within)
        nothing_own = indexes is None and within is not None and self.heads.readable_empty(tenant, within)
        if nothing_own and not earlier:
            return []
        vector = self._query_vector(query)
        dense_flt = flt.and_(EMBEDDED) if self.flagged else flt  # rows still in the backlog: BM25 only
        limits = text_limit, vector_limit = limit, dense_limit or limit
        text = text_query or query
        text_hits: list[tuple[Memory, float]] = []
        dense_hits: list[tuple[Memory, float]] = []
        if indexes is not None:  # the user's index (the second) by the input's content words, as their archive
            text_hits, dense_hits = held_search(indexes, (text, archive_query(text)), vector, flt, dense_flt, limits,
                                                distinct)
        elif not nothing_own:
            self.store_cold = False  # Lite's search structures are built by this search: later loads need not wait
            fetch = DISTINCT_FETCH if distinct else 1  # copies must not leave a distinct list short
            text_hits = as_hits(self.store.search_text(
                self.spec.name, text, limit=min(text_limit * fetch, QUERY_WINDOW), where=flt, fields=OUTPUT_FIELDS))
            dense_hits = as_hits(self.store.search_dense(
                self.spec.name, vector, limit=min(vector_limit * fetch, QUERY_WINDOW), where=dense_flt,
                fields=OUTPUT_FIELDS)) if vector is not None else []
            if distinct:
                text_hits, dense_hits = one_per_text(text_hits, text_limit), one_per_text(dense_hits, vector_limit)
        if earlier and within is not None:  # ranked with the conversation's own (issue 48)
            text_hits, dense_hits = with_earlier(self, tenant, within, text, vector, limits, distinct,
                                                 (text_hits, dense_hits))
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
