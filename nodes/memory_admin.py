"""Memory administration: list a namespace with paging, get one memory, delete one or a namespace."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator, Field

from common.errors import NotFoundError
from common.models import (
    IDENTIFIER_PATTERN,
    Identifier,
    Memory,
    MemoryKind,
    NodeResponse,
    Scope,
    StrictModel,
    parse_json_string,
)
from services.deps import Deps
from storage.base import Filter
from storage.memory_rows import kinds_filter, live_filter, namespace_filter

PAGE_LIMIT = 1000


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
    next_offset: int | None = Field(description="Offset of the next page, or null at the end.")


class MemoryGetResponse(NodeResponse):
    memory: Memory


class NamespaceDeleteRequest(StrictModel):
    """What to delete: an agent's memories, optionally narrowed to a session and/or a user."""

    agent_id: Identifier
    session_id: Identifier | None = None
    user_id: Identifier | None = None


class DeleteResponse(NodeResponse):
    deleted: int


def list_memories(request: MemoryListRequest, deps: Deps) -> MemoryListResponse:
    """Return one page of a namespace's memories, oldest first."""
    where = namespace_filter(deps.tenant, request.agent_id, request.session_id, request.user_id)
    where = where.and_(live_filter(request.include_superseded)).and_(kinds_filter(request.kinds, exclude_turns=False))
    if request.scope:
        where = where.and_(Filter("scope == {scope}", {"scope": request.scope}))
    page = deps.memories.page(deps.tenant, where, limit=request.limit + 1, offset=request.offset)
    more = len(page) > request.limit
    return MemoryListResponse(memories=page[: request.limit], limit=request.limit, offset=request.offset,
                              next_offset=request.offset + request.limit if more else None)


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
    where = namespace_filter(deps.tenant, request.agent_id, request.session_id, request.user_id)
    count = memories.count(deps.tenant, where)
    memories.delete_namespace(deps.tenant, request.agent_id, request.session_id, request.user_id)
    if not request.user_id:  # sessions belong to agent + session; a user-narrowed delete leaves them
        deps.sessions.delete(deps.tenant, request.agent_id, request.session_id)
    return DeleteResponse(deleted=count)
