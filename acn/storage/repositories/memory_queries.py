"""The questions the pipelines ask of the memory store, by name: what a namespace may read, what is in force,
what a rollback undoes. The store's expression language stays inside storage/.

Every caller above storage asks one of these (retrieval, assembly, the write path, the session and admin nodes,
the inspector); none writes a filter. So a new question is a new method here, reviewed beside the encryption
(acn/storage/database/sealed.py refuses filters on sealed fields) and the in-process evaluator
(acn/storage/database/lite/predicate.py) that must understand it, instead of a string in a node. They stand on the
primitives a MemoryRepository implements over a MemoryStore (as langgraph's store derives its helpers from `batch`);
a repository holds its queries as `memories.queries`.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Protocol

from acn.common.models import Memory, Namespace
from acn.storage.database import (
    OUTPUT_FIELDS,
    CollectionSpec,
    Filter,
    HeldIndexes,
    Kept,
    MemoryStore,
    ReadCache,
    Record,
    Scored,
    client_id,
    from_record,
    group_filter,
    held_rows,
    kinds_filter,
    live_filter,
    namespace_filter,
    scope_filter,
    session_filter,
    stored_ids,
    tenant_filter,
    user_filter,
)
from acn.storage.repositories.memory_heads import MemoryHeads
from acn.storage.repositories.user_archive import earlier_at


def readable(namespace: Namespace, scopes: Sequence[str] | None = None, *, include_superseded: bool = False,
             kinds: Sequence[str] | None = None, exclude_turns: bool = True) -> Filter:
    """Return what a namespace may read in these scopes: live rows unless asked, archived turns unless named."""
    return (scope_filter(namespace, scopes).and_(live_filter(include_superseded))
            .and_(kinds_filter(kinds, exclude_turns=exclude_turns)))


def scope_key(namespace: Namespace, scopes: Sequence[str] | None = None) -> Hashable:
    """Return a hashable name of what `readable(namespace, scopes)` selects, for caches keyed by it."""
    return scope_filter(namespace, scopes).cache_key()


class Primitives(Protocol):
    """What the named reads stand on: a memory repository's primitive reads and the parts they consult."""

    store: MemoryStore
    spec: CollectionSpec
    heads: MemoryHeads
    cache: ReadCache | None
    held: HeldIndexes | None
    kept: Kept

    def find(self, tenant: str, where: Filter, *, limit: int, offset: int = 0,
             within: Namespace | None = None) -> list[Memory]: ...

    def count(self, tenant: str, where: Filter) -> int: ...

    def query_all(self, tenant: str, where: Filter, fields: list[str]) -> list[Record]: ...

    def search(self, tenant: str, query: str, where: Filter, *, limit: int, dense_limit: int | None = None,
               text_query: str | None = None, within: Namespace | None = None,
               distinct: bool = False, earlier: bool = False) -> list[Scored]: ...


class MemoryQueries:
    """Named reads over a repository's primitives (find, count, query_all, search) and its own page read."""

    def __init__(self, memories: Primitives) -> None:
        self._memories = memories

    # -- retrieval ---------------------------------------------------------------------------------------------

    def _rows_held(self, tenant: str, namespace: Namespace, where: Filter, fields: list[str]) -> list[Record] | None:
        """Return the rows matching `where` among those the namespace can read, from memory (None: not held).

        A Lite file: the session's index, once loaded (or known empty from the start), holds every row it can read,
        kept current by the writes: no scan for the write path's dedup pool."""
        held = self._memories.held
        if held is None:
            return None
        flt = tenant_filter(tenant).and_(where).and_(group_filter(namespace.agent_id, namespace.session_id))
        indexes = held.of(tenant, namespace, flt)
        return None if indexes is None else held_rows(indexes, flt, fields)

    def texts_held(self, tenant: str, namespace: Namespace) -> list[str]:
        """Return the texts of every row the namespace can read (archived turns too), in write order, when they are
        held in memory; empty otherwise (a server, or an index not loaded)."""
        held = self._rows_held(tenant, namespace, readable(namespace, exclude_turns=False), ["content"])
        return [str(row["content"]) for row in held or []]

    def search_readable(self, tenant: str, namespace: Namespace, query: str, *, scopes: Sequence[str] | None,
                        include_superseded: bool, kinds: Sequence[str] | None, limit: int,
                        text_query: str | None = None, distinct: bool = False,
                        earlier: bool = False) -> list[Scored]:
        """Return BM25 (and dense) candidates among what the namespace may read (see `search`; `earlier`: the
        user's archived messages of their other conversations too)."""
        where = readable(namespace, scopes, include_superseded=include_superseded, kinds=kinds)
        return self._memories.search(tenant, query, where, limit=limit, within=namespace, distinct=distinct,
                                     text_query=text_query, earlier=earlier)

    def by_key(self, tenant: str, namespace: Namespace, key: str, *, scopes: Sequence[str] | None,
               include_superseded: bool, kinds: Sequence[str] | None, limit: int) -> list[Memory]:
        """Return the readable memories written under this key (a memory_write `key`), oldest first."""
        where = readable(namespace, scopes, include_superseded=include_superseded, kinds=kinds)
        return self._memories.find(tenant, where.and_(Filter("key == {lookup}", {"lookup": key})), limit=limit,
                         within=namespace)

    # -- what is in force --------------------------------------------------------------------------------------

    def standing(self, tenant: str, namespace: Namespace, kinds: Sequence[str], *, limit: int) -> list[Memory]:
        """Return the namespace's live memories of these kinds (archived turns too when named).

        With a Lite file kept until the agent or the shared scope writes a memory (ReadCache.agent_view): every
        assemble reads them, and at 10k memories in one namespace testing and sorting the rows took ~7 % of a call
        (~21 % BM25 only). Against a server another replica may write at any time unseen here: read every call."""
        def read() -> list[Memory]:
            return self._memories.find(tenant, readable(namespace, kinds=kinds, exclude_turns=False), limit=limit,
                                       within=namespace)
        kept = self._memories.kept
        if not kept.remembers or "turn" in kinds:  # archived messages do not bump the agent's stamp
            return read()
        key = ("standing", tenant, self._reader_key(tenant, namespace), tuple(kinds), limit)
        return list(kept.agent_view(tenant, namespace, key, read))

    def superseded_in(self, tenant: str, namespace: Namespace, *, limit: int) -> list[Memory]:
        """Return the namespace's closed memories (superseded, updated away or rolled back), oldest first."""
        return self._memories.find(tenant, scope_filter(namespace).and_(Filter("valid_to > 0")), limit=limit,
                         within=namespace)

    def superseded_key(self, tenant: str, namespace: Namespace) -> Hashable:
        """Return the cache key of `superseded_in` for this namespace (what a supersede or delete invalidates)."""
        return ("superseded_in", tenant, self._reader_key(tenant, namespace))

    def _reader_key(self, tenant: str, namespace: Namespace) -> Hashable:
        """Return what a namespace's reads depend on: its scopes, but a conversation with no row of its own (a
        returning user's new one) reads exactly what every other such conversation of the user reads, so they share
        one key (a view computed for one serves the next: no pass over the user's rows per new conversation)."""
        if self._memories.heads.session_empty(tenant, namespace):
            return ("rowless", namespace.agent_id, namespace.user_id or "")
        return scope_key(namespace)

    def within_by_ids(self, tenant: str, namespace: Namespace, ids: Sequence[str], *, limit: int) -> list[Memory]:
        """Return the memories with these ids that the namespace may read."""
        return self._memories.find(tenant, Filter("id in {succ}", {"succ": stored_ids(tenant, ids)}), limit=limit,
                         within=namespace)

    def closed_by(self, tenant: str, namespace: Namespace, successors: Sequence[str], *,
                  limit: int) -> list[Memory]:
        """Return the readable memories that one of these memories superseded."""
        return self._memories.find(tenant, Filter("superseded_by in {rids}", {"rids": sorted(successors)}), limit=limit,
                         within=namespace)

    # -- a session rolled back ---------------------------------------------------------------------------------

    def rolled_back_after(self, tenant: str, namespace: Namespace, turn: int, *, limit: int) -> list[Memory]:
        """Return the session's own live rows written from turns after `turn` (what a rollback to it undoes)."""
        where = (session_filter(tenant, namespace).and_(live_filter(False))
                 .and_(Filter('scope == "session" and turn_from > {rb}', {"rb": turn})))
        return self._memories.find(tenant, where, limit=limit, within=namespace)

    # -- the write path's dedup pool ---------------------------------------------------------------------------

    def known_rows(self, tenant: str, namespace: Namespace, scopes: Sequence[str], fields: list[str], *,
                   kinds: Sequence[str] | None = None, live: bool = True,
                   updated_since: int | None = None) -> list[Record]:
        """Return every row (these fields) of the namespace's scopes, however many: live ones, or with
        `live=False` closed ones too; kinds as named (archived turns only when named); with `updated_since`,
        only rows stamped at or after that millisecond."""
        if self._memories.heads.readable_empty(tenant, namespace):  # a new session of a new agent: nothing to read
            return []
        where = readable(namespace, scopes, include_superseded=not live, kinds=kinds)
        if updated_since is not None:
            where = where.and_(Filter("updated_at >= {pool_since}", {"pool_since": updated_since}))
        held = self._rows_held(tenant, namespace, where, fields)
        return held if held is not None else self._memories.query_all(tenant, where, fields)

    # -- the admin API -----------------------------------------------------------------------------------------

    def listing(self, tenant: str, agent_id: str, session_id: str | None, user_id: str | None, *,
                include_superseded: bool, kinds: Sequence[str] | None, scope: str | None, limit: int,
                offset: int) -> list[Memory]:
        """Return one page of an agent's memories (optionally one session's, one user's, one scope's), oldest
        first."""
        where = namespace_filter(tenant, agent_id, session_id, user_id).and_(live_filter(include_superseded))
        where = where.and_(kinds_filter(kinds, exclude_turns=False))
        if scope:
            where = where.and_(Filter("scope == {scope}", {"scope": scope}))
        return self._page(tenant, where, limit=limit, offset=offset)

    def count_in(self, tenant: str, agent_id: str, session_id: str | None, user_id: str | None) -> int:
        """Return how many rows an agent (or one session, one user of it) holds, up to the store's window."""
        return self._memories.count(tenant, namespace_filter(tenant, agent_id, session_id, user_id))

    # -- forgetting a user -------------------------------------------------------------------------------------

    def conversations_of(self, tenant: str, user_id: str, agent_id: str | None) -> set[tuple[str, str]]:
        """Return the (agent, session) of every conversation holding a row written with this user_id."""
        rows = self._memories.query_all(tenant, user_filter(user_id, agent_id), ["agent_id", "session_id"])
        return {(str(row["agent_id"]), str(row["session_id"])) for row in rows}

    def count_user(self, tenant: str, user_id: str, agent_id: str | None) -> int:
        """Return how many rows were written with this user_id (of one agent, or of every agent)."""
        return len(self._memories.query_all(tenant, user_filter(user_id, agent_id), ["id"]))

    def others_in(self, tenant: str, agent_id: str, session_id: str, user_id: str) -> bool:
        """Return True when a conversation holds a row another user (or no user) wrote."""
        where = namespace_filter(tenant, agent_id, session_id, None).and_(
            Filter("user_id != {other_user}", {"other_user": user_id}))
        return bool(self._memories.find(tenant, where, limit=1))

    def earlier_at(self, tenant: str, namespace: Namespace,
                   places: Sequence[tuple[str, int]]) -> list[Memory] | None:
        """Return the user's archived messages at these (session id, turn) places of their conversations, from the
        index of their archive (None: not held): see user_archive.py."""
        return earlier_at(self._memories.cache, tenant, namespace, places)

    # -- the inspector ---------------------------------------------------------------------------------------------

    def tenant_rows(self, tenant: str, fields: list[str], *, limit: int) -> list[Record]:
        """Return up to `limit` rows (these fields) of a whole tenant, for the inspector's overview."""
        memories = self._memories
        return memories.store.query(memories.spec.name, tenant_filter(tenant), fields=fields, limit=limit)

    def _page(self, tenant: str, where: Filter, *, limit: int, offset: int = 0) -> list[Memory]:
        """Return one page of matching memories in a stable order (created_at, id)."""
        store, name = self._memories.store, self._memories.spec.name
        flt = tenant_filter(tenant).and_(where)
        keys = store.query(name, flt, fields=["id", "created_at"], limit=16384)
        keys.sort(key=lambda row: (row["created_at"], client_id(row["id"])))  # the order clients always saw
        ids = [row["id"] for row in keys[offset: offset + limit]]
        if not ids:
            return []
        rows = store.query(name, Filter("tenant == {pt} and id in {pids}", {"pt": tenant, "pids": ids}),
                           fields=OUTPUT_FIELDS, limit=len(ids))
        order = {client_id(key): index for index, key in enumerate(ids)}
        return sorted((from_record(r) for r in rows), key=lambda m: order[m.id])
