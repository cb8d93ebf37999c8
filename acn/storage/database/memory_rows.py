"""Memories as store rows: the collection spec, record conversion, search candidates and the filters every read
is built from (tenant, session group, session, namespace, scopes, live rows, kinds)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from acn.common.models import Memory, Namespace
from acn.storage.database.base import CollectionSpec, Filter, MemoryStore, Record
from acn.storage.database.sealed import CIPHER_FIELD

ALL_SCOPES = ("session", "user", "agent", "shared")
MEMORY_FIELDS = {
    "tenant": "varchar", "agent_id": "varchar", "session_id": "varchar", "user_id": "varchar",
    "scope": "varchar", "kind": "varchar", "key": "varchar", "importance": "float",
    "created_at": "int64", "updated_at": "int64", "version": "int64", "valid_to": "int64",
    "superseded_by": "varchar", "turn_from": "int64", "turn_to": "int64", "doc": "json",
}
OUTPUT_FIELDS = ["id", "content", *MEMORY_FIELDS]
# A collection with vectors holds this flag: 1 once a row's vector is its text's, 0 while the row waits in the
# embedding backlog (acn/storage/process/embedding_backlog.py) with pending_vector(). Dense search reads flagged rows
# only.
EMBEDDED_FIELD = "embedded"
EMBEDDED = Filter("embedded == 1")
NO_TURN = -1
# The store's query window: a session archive larger than this is read from the store each time.
QUERY_WINDOW = 16384
# Ids are scoped by tenant: a row's primary key is its id, ID_SCOPE and its tenant's tag, so two tenants' rows may
# share an id and never meet (before, one tenant's import of another's id was refused with 409, an oracle, or took
# the row over). The client only ever sees the id. ID_SCOPE is outside the identifier alphabet: no id contains it.
ID_SCOPE = "~"
TAG_CHARS = 16
# The primary key holds 128 characters: ids up to this long are scoped (imports are held to it; the ids this
# server makes are 45 at most). A longer id stored before scoping keeps its unscoped key.
SCOPED_ID_CHARS = 128 - len(ID_SCOPE) - TAG_CHARS


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

    Sealed (encrypted at rest, acn/storage/database/sealed.py): another collection, whose BM25 field holds hashed tokens
    and which has a field for the ciphertext. With a dimension, the EMBEDDED_FIELD flag too (flagged=False: a
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


@lru_cache(maxsize=4096)
def tenant_tag(tenant: str) -> str:
    """Return the tenant's part of its rows' primary keys (a hash: fixed length, any tenant name)."""
    return hashlib.sha256(tenant.encode("utf-8")).hexdigest()[:TAG_CHARS]


def stored_id(tenant: str, memory_id: str) -> str:
    """Return the primary key of a tenant's row with this id."""
    if len(memory_id) > SCOPED_ID_CHARS or ID_SCOPE in memory_id:
        return memory_id
    return f"{memory_id}{ID_SCOPE}{tenant_tag(tenant)}"


def stored_ids(tenant: str, ids: Sequence[str]) -> list[str]:
    """Return the primary keys of a tenant's rows with these ids, sorted, each once."""
    return sorted({stored_id(tenant, memory_id) for memory_id in ids})


def client_id(key: str) -> str:
    """Return the id a client knows of a row's primary key."""
    return key.split(ID_SCOPE, 1)[0]


def with_client_id(record: Record) -> Record:
    """Return the row with its id as the client knows it."""
    return {**record, "id": client_id(str(record["id"]))} if "id" in record else record


def to_record(memory: Memory, tenant: str, vector: list[float] | None) -> Record:
    """Return the store row of a memory."""
    turn_from, turn_to = (memory.turn_range or [NO_TURN, NO_TURN])[:2]
    record: Record = {
        "id": stored_id(tenant, memory.id), "content": memory.content, "tenant": tenant, "agent_id": memory.agent_id,
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
        id=client_id(str(record["id"])), kind=record["kind"], content=record["content"], key=record["key"] or None,
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


# Placeholder names say which filter they belong to: Filter.and_ refuses a clash, and the filters below are
# combined freely (tenant_filter(...).and_(group_filter(...)).and_(scope_filter(...)) and so on).


def tenant_filter(tenant: str) -> Filter:
    """Return the filter every read starts from: one tenant never sees another's rows."""
    return Filter("tenant == {tenant}", {"tenant": tenant})


def group_filter(agent_id: str, session_id: str) -> Filter:
    """Return the filter of every row a session may read: its own, its agent's other than other sessions',
    and the shared ones. Every scope_filter of that namespace selects within it."""
    return Filter('(agent_id == {group_agent} and (scope != "session" or session_id == {group_session}))'
                  ' or scope == "shared"', {"group_agent": agent_id, "group_session": session_id})


# A user's rows (scope user) are held apart from any session's (Lite): in an index of their own, shared by every
# conversation of the user, under a group key whose third part is USER_GROUP and the user id ("~" is outside the
# identifier alphabet: no session id starts so).
USER_GROUP = "~user~"


def user_group(user_id: str) -> str:
    """Return the group-key part naming a user's own rows (see USER_GROUP)."""
    return USER_GROUP + user_id


# The archived messages of every conversation of a user with an agent, held apart again (a later conversation of
# the user searches them beside its own rows: acn/storage/repositories/user_archive.py).
USER_TURNS = "~turns~"


def user_turns_group(user_id: str) -> str:
    """Return the group-key part naming a user's archived messages of all their conversations (see USER_TURNS)."""
    return USER_TURNS + user_id


def group_user(part: str) -> str | None:
    """Return the user id a group-key part names, or None for a session's group (or a user's archive)."""
    return part[len(USER_GROUP):] if part.startswith(USER_GROUP) else None


def group_turns_user(part: str) -> str | None:
    """Return the user id whose archived messages a group-key part names, or None."""
    return part[len(USER_TURNS):] if part.startswith(USER_TURNS) else None


def is_session_group(part: str) -> bool:
    """Return True when a group-key part names a session (not a user's rows or archive)."""
    return not part.startswith("~")


def held_group_filter(agent_id: str, part: str) -> Filter:
    """Return the rows an in-process index of a group holds: a session's (its own, its agent's agent-scope rows,
    the shared ones: no user's rows), a user's (their user-scope rows of the agent), or a user's archive (their
    archived messages of every conversation with the agent)."""
    archive = group_turns_user(part)
    if archive is not None:
        return Filter('agent_id == {group_agent} and kind == "turn" and user_id == {group_user}',
                      {"group_agent": agent_id, "group_user": archive})
    user = group_user(part)
    if user is not None:
        return Filter('agent_id == {group_agent} and scope == "user" and user_id == {group_user}',
                      {"group_agent": agent_id, "group_user": user})
    return Filter('(agent_id == {group_agent} and scope != "user" and (scope != "session" or session_id == '
                  '{group_session})) or scope == "shared"', {"group_agent": agent_id, "group_session": part})


# Parameters whose clauses test a session id only together with `scope == "session"` (scope_filter) or
# `scope != "session"` (group_filter): on a user's rows (scope user) their value cannot change the answer.
SESSION_GUARDED = ("scope_session", "group_session")


def for_user_rows(where: Filter) -> Filter:
    """Return the filter as a user's index evaluates it: the session ids of SESSION_GUARDED clauses blanked, so that
    every conversation of the user asks the same question of the user's rows (the index keeps its answer)."""
    if not any(name in where.params for name in SESSION_GUARDED):
        return where
    return Filter(where.template, {k: ("" if k in SESSION_GUARDED else v) for k, v in where.params.items()})


def session_filter(tenant: str, namespace: Namespace) -> Filter:
    """Return the filter of one session's rows."""
    return Filter("tenant == {session_tenant} and agent_id == {session_agent} and session_id == {session_id}",
                  {"session_tenant": tenant, "session_agent": namespace.agent_id, "session_id": namespace.session_id})


def namespace_filter(tenant: str, agent_id: str, session_id: str | None, user_id: str | None) -> Filter:
    """Return the filter of an agent's rows, optionally narrowed to a session and/or a user."""
    flt = Filter("tenant == {namespace_tenant} and agent_id == {namespace_agent}",
                 {"namespace_tenant": tenant, "namespace_agent": agent_id})
    if session_id:
        flt = flt.and_(Filter("session_id == {namespace_session}", {"namespace_session": session_id}))
    if user_id:
        flt = flt.and_(Filter("user_id == {namespace_user}", {"namespace_user": user_id}))
    return flt


def user_filter(user_id: str, agent_id: str | None = None) -> Filter:
    """Return the filter of every row written with this user_id (any scope, any conversation), optionally of one
    agent: what forgetting a user deletes."""
    flt = Filter("user_id == {forget_user}", {"forget_user": user_id})
    if agent_id:
        flt = flt.and_(Filter("agent_id == {forget_agent}", {"forget_agent": agent_id}))
    return flt


def scope_filter(namespace: Namespace, scopes: Sequence[str] | None = None) -> Filter:
    """Return the filter of what a namespace may read: session + user + agent + shared by default."""
    wanted = [s for s in (scopes or ALL_SCOPES) if s != "user" or namespace.user_id]
    params: dict[str, Any] = {"scope_agent": namespace.agent_id, "scope_session": namespace.session_id,
                              "scope_user": namespace.user_id or ""}
    clauses = {
        "session": '(scope == "session" and agent_id == {scope_agent} and session_id == {scope_session})',
        "user": '(scope == "user" and agent_id == {scope_agent} and user_id == {scope_user})',
        "agent": '(scope == "agent" and agent_id == {scope_agent})',
        "shared": '(scope == "shared")',
    }
    template = " or ".join(clauses[s] for s in wanted) or 'scope == "none"'
    used = {k: v for k, v in params.items() if "{" + k + "}" in template}
    return Filter(template, used)


def id_range(low: str, high: str | None) -> Filter:
    """Return the filter of the ids from low (included) to high (excluded; None: no end)."""
    if high is None:
        return Filter("id >= {range_low}", {"range_low": low})
    return Filter("id >= {range_low} and id < {range_high}", {"range_low": low, "range_high": high})


RANGE_CUTS = 8  # ranges a full query window is cut into (every_row)


def every_row(store: MemoryStore, collection: str, where: Filter, fields: list[str], low: str = "",
              high: str | None = None) -> list[Record]:
    """Return every row of a collection that matches, however many: one query of the id range, cut into
    RANGE_CUTS ranges (each read the same way) while a query fills its window."""
    wanted = fields if "id" in fields else [*fields, "id"]
    rows = store.query(collection, where.and_(id_range(low, high)), fields=wanted, limit=QUERY_WINDOW)
    if len(rows) < QUERY_WINDOW:
        return rows
    step = QUERY_WINDOW // RANGE_CUTS
    starts = [low, *sorted(str(row["id"]) for row in rows)[step::step]]  # each range leaves out sampled ids
    stops: list[str | None] = [*starts[1:], high]
    return [row for start, stop in zip(starts, stops, strict=True)
            for row in every_row(store, collection, where, fields, start, stop)]


# Cuts of the id space (memories are "mem_" + hex, archived messages "turn_" + hex) into ranges of about equal
# size: a large read is made in several short queries, so that reads of others are not queued behind one long one.
ID_CUTS: tuple[str, ...] = ("", "mem_4", "mem_8", "mem_c", "turn_", "turn_4", "turn_8", "turn_c")


def live_filter(include_superseded: bool) -> Filter:
    """Return the filter that hides superseded memories unless asked for."""
    return Filter("") if include_superseded else Filter("valid_to == 0")


def kinds_filter(kinds: Sequence[str] | None, *, exclude_turns: bool) -> Filter:
    """Return the filter of the kinds asked for (archived turns are excluded unless named)."""
    if kinds:
        return Filter("kind in {kinds}", {"kinds": list(kinds)})
    return Filter('kind != "turn"') if exclude_turns else Filter("")
