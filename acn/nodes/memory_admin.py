"""Memory administration: list a namespace with paging, get one memory, import exported rows, delete one or a
namespace."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field, model_validator

from acn.common.errors import NotFoundError, ValidationError
from acn.common.models import (
    IDENTIFIER_PATTERN,
    INT64_MAX,
    KEY_PATTERN,
    MAX_VERSION,
    Identifier,
    Memory,
    MemoryKind,
    NodeResponse,
    SafeJsonObject,
    Scope,
    StrictModel,
    TurnNumber,
    parse_json_string,
)
from acn.common.stored import memory_problems
from acn.memory.items import MAX_CONTENT_CHARS
from acn.services.deps import Deps
from acn.storage.repositories import SCOPED_ID_CHARS

PAGE_LIMIT = 1000
# A page stops before this many bytes of memories (at least one memory): every answer then fits the server's output
# buffer (waitress holds 16 MB before a request thread waits for the client) and nginx's, so a client that never
# reads its answers costs a buffer, not a thread. 1,000 memories of ordinary length still fit one page.
PAGE_BYTES = 2_000_000
IMPORT_LIMIT = 1000


def _split_csv(value: object) -> object:
    if isinstance(value, str) and not value.strip().startswith("["):
        return [part for part in value.split(",") if part]
    return parse_json_string(value)


class MemoryListRequest(StrictModel):
    """Which memories to list: an agent, optionally one session and/or one user."""

    agent_id: Identifier
    session_id: Identifier | None = None
    user_id: Identifier | None = None
    kinds: Annotated[list[MemoryKind] | None, BeforeValidator(_split_csv)] = Field(
        default=None, description="Only these kinds (comma-separated in a query string).")
    scope: Scope | None = None
    include_superseded: bool = True
    limit: int = Field(default=100, ge=1, le=PAGE_LIMIT)
    offset: int = Field(default=0, ge=0, le=15000)


class MemoryListResponse(NodeResponse):
    memories: list[Memory]
    limit: int
    offset: int
    next_offset: int | None = Field(
        description="Offset of the next page, or null at the end. A page may hold fewer than `limit` memories "
                    "before the end: it stops before 2 MB.")


class MemoryGetResponse(NodeResponse):
    memory: Memory


class NamespaceDeleteRequest(StrictModel):
    """What to delete: an agent's memories, optionally narrowed to a session and/or a user; or a user's memories
    in every conversation of every agent (user_id alone)."""

    agent_id: Identifier | None = Field(default=None, description="The agent; omit it (with a user_id) to forget "
                                        "the user in every agent of the tenant.")
    session_id: Identifier | None = None
    user_id: Identifier | None = Field(default=None, description="Every row written with this user_id, in every "
                                       "conversation; the state of conversations only this user wrote goes too.")

    @model_validator(mode="after")
    def _named(self) -> NamespaceDeleteRequest:
        if not self.agent_id and not self.user_id:
            raise ValueError("give agent_id, user_id or both")
        if self.session_id and not self.agent_id:
            raise ValueError("session_id needs agent_id")
        return self


class DeleteResponse(NodeResponse):
    deleted: int
    sessions_deleted: int | None = Field(default=None, description="A user forgotten: the conversations whose "
                                         "state (buffer, segments, versions) went with their rows.")
    remaining: int | None = Field(default=None, description="A user forgotten: the rows written with the user_id "
                                  "still stored after the delete (0: none).")


Epoch = Annotated[int, Field(ge=0, le=INT64_MAX)]


class ImportedMemory(Memory):
    """An exported memory (`acn export`, GET /v1/memories) restored as it was: id, kind, versions, history.

    The same fields as Memory, held to what may reach the store: ids and namespaces are identifiers (they
    reach filters), keys carry no quote, numbers fit int64.
    """

    # An id is scoped by tenant in the store's 128-character key (acn/storage/database/memory_rows.py): at most 111
    # here.
    id: Identifier = Field(max_length=SCOPED_ID_CHARS)
    # What memory_write and the turn archive write at most: within the store's VARCHAR bytes, sealed or not.
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS)
    key: str | None = Field(default=None, max_length=128, pattern=KEY_PATTERN)
    importance: float = Field(ge=0, le=10)
    agent_id: Identifier
    session_id: Identifier
    user_id: Identifier | None = None
    created_at: Epoch
    updated_at: Epoch
    version: int = Field(ge=1, le=MAX_VERSION)
    valid_to: Epoch | None = None
    superseded_by: Identifier | None = None
    turn_range: list[TurnNumber] | None = Field(default=None, min_length=2, max_length=2)
    source_ids: list[Identifier] | None = Field(default=None, max_length=10_000)
    meta: SafeJsonObject = Field(default_factory=dict)
    history: list[SafeJsonObject] | None = Field(default=None, max_length=10_000)


class MemoryImportRequest(StrictModel):
    """Rows to restore verbatim into the caller's tenant (an admin route: never an agent's tool)."""

    memories: list[ImportedMemory] = Field(min_length=1, max_length=IMPORT_LIMIT)


class MemoryImportResponse(NodeResponse):
    created: int = Field(description="Rows that did not exist (by id) in this tenant.")
    updated: int = Field(description="Rows that existed with different fields and were replaced.")
    unchanged: int = Field(description="Rows already stored exactly so.")


def list_memories(request: MemoryListRequest, deps: Deps) -> MemoryListResponse:
    """Return one page of a namespace's memories, oldest first."""
    page = deps.memories.queries.listing(deps.tenant, request.agent_id, request.session_id, request.user_id,
                                 include_superseded=request.include_superseded, kinds=request.kinds,
                                 scope=request.scope, limit=request.limit + 1, offset=request.offset)
    kept = within_bytes(page[: request.limit], PAGE_BYTES)
    more = len(page) > len(kept)
    return MemoryListResponse(memories=kept, limit=request.limit, offset=request.offset,
                              next_offset=request.offset + len(kept) if more else None)


def within_bytes(memories: list[Memory], budget: int) -> list[Memory]:
    """Return the longest head of `memories` whose JSON fits `budget` bytes (the first one whatever its size)."""
    total = 0
    for count, memory in enumerate(memories):
        total += len(memory.model_dump_json().encode())
        if total > budget and count:
            return memories[:count]
    return memories


def get_memory(memory_id: str, deps: Deps) -> MemoryGetResponse:
    """Return one memory with its history."""
    memory = deps.memories.get(deps.tenant, memory_id) if valid_id(memory_id) else None
    if memory is None:
        raise NotFoundError(f"no memory {memory_id!r}")
    return MemoryGetResponse(memory=memory)


def delete_memory(memory_id: str, deps: Deps) -> DeleteResponse:
    """Delete one memory; 404 when it does not exist for this tenant."""
    memories = deps.memories
    if not valid_id(memory_id) or memories.get(deps.tenant, memory_id) is None:
        raise NotFoundError(f"no memory {memory_id!r}")
    memories.delete_ids(deps.tenant, [memory_id])
    return DeleteResponse(deleted=1)


def valid_id(memory_id: str) -> bool:
    """Return True for ids this pack can have issued (anything else cannot exist: 404, not a filter)."""
    # fullmatch: with re.match, the pattern's "$" also matches before a trailing newline ("mem_x\n" → 500).
    return re.fullmatch(IDENTIFIER_PATTERN, memory_id) is not None


def delete_namespace(request: NamespaceDeleteRequest, deps: Deps) -> DeleteResponse:
    """Delete every memory of a namespace and, unless narrowed to a user, its session state."""
    memories = deps.memories
    if request.user_id and not request.session_id:
        return forget_user(request.user_id, request.agent_id, deps)
    if request.agent_id is None:  # the model's check already refused it
        raise ValidationError("session_id needs agent_id")
    count = memories.queries.count_in(deps.tenant, request.agent_id, request.session_id, request.user_id)
    memories.delete_namespace(deps.tenant, request.agent_id, request.session_id, request.user_id)
    if not request.user_id:  # sessions belong to agent + session; a user-narrowed delete leaves them
        deps.sessions.delete(deps.tenant, request.agent_id, request.session_id)
    return DeleteResponse(deleted=count)


def forget_user(user_id: str, agent_id: str | None, deps: Deps) -> DeleteResponse:
    """Delete every row written with the user_id in every conversation (of one agent, or all), and the state of
    the conversations no one else wrote in (their buffers and segments hold the user's words); then count again."""
    memories = deps.memories
    count = memories.queries.count_user(deps.tenant, user_id, agent_id)
    conversations = memories.queries.conversations_of(deps.tenant, user_id, agent_id)
    memories.delete_user(deps.tenant, user_id, agent_id)
    alone = [(agent, session) for agent, session in sorted(conversations)
             if not memories.queries.others_in(deps.tenant, agent, session, user_id)]
    for agent, session in alone:
        deps.sessions.delete(deps.tenant, agent, session)
    return DeleteResponse(deleted=count, sessions_deleted=len(alone),
                          remaining=memories.queries.count_user(deps.tenant, user_id, agent_id))


def import_memories(request: MemoryImportRequest, deps: Deps) -> MemoryImportResponse:
    """Write exported rows as they are (ids, kinds, versions, history, supersede links, timestamps, turn ranges).

    memory_write would re-derive all of that (dedup, supersede, new ids and times, archived turns refused), so a
    restore goes through here instead. Rows are matched by id within the caller's tenant only.
    """
    memories = deps.memories
    rows = [Memory.model_validate(item.model_dump()) for item in request.memories]
    # What later arithmetic cannot hold (a stamp of 2^63 - 1, a version of 2^53) is refused here, by the same
    # check every reader applies (acn/common/stored.py), rather than breaking the session's later calls.
    problems = [f"memories[{index}].{field}: {why} (id {row.id})"
                for index, row in enumerate(rows) for field, why in memory_problems(row)]
    if problems:
        raise ValidationError(problems[0], problems)
    ids = list(dict.fromkeys(row.id for row in rows))
    if len(ids) != len(rows):
        raise ValidationError("memories: the same id appears twice in one import")
    # Ids are scoped by tenant in the store (acn/storage/database/memory_rows.py stored_id): another tenant's rows with
    # the same ids are never read, replaced or told of. Imports of one tenant run one at a time, so two racing over
    # the same ids answer per row (created, then unchanged or updated) instead of both inserting one key; with
    # ACN_REDIS_URL across replicas too (a Redis lease).
    with memories.tenant_lock(deps.tenant), deps.sessions.tenant_exclusive(deps.tenant, "import"):
        existing = {m.id: m for m in memories.get_many(deps.tenant, ids)}
        created = [row for row in rows if row.id not in existing]
        changed = [row for row in rows if row.id in existing and existing[row.id] != row]
        if created or changed:
            memories.save(deps.tenant, created + changed, new_ids={row.id for row in created})
    return MemoryImportResponse(created=len(created), updated=len(changed),
                                unchanged=len(rows) - len(created) - len(changed))
