"""MemoryWrite: event-based writes with dedup, supersede by key, and versions."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from acn.common.errors import ValidationError
from acn.common.models import (
    MessageList,
    Namespace,
    NodeResponse,
    parse_json_string,
)
from acn.memory.durable import UserMemory, extracted_for
from acn.memory.items import MemoryItem, WriteResult
from acn.memory.write import write_items
from acn.nodes.spec import Description, NodeSpec
from acn.services.deps import Deps
from acn.text.pii import redact_pii, redact_value


class MemoryWriteRequest(Namespace):
    """Write memories explicitly (items) and/or extract them from messages."""

    items: Annotated[list[MemoryItem], BeforeValidator(parse_json_string)] = Field(
        default_factory=list, max_length=500, description="Memories to write (a JSON string of the list works too)."
    )
    messages: MessageList = Field(default_factory=list, max_length=500)
    extract: bool = Field(
        default=False, description="Extract events (identity, preferences, constraints, …) from messages.")
    user_memory: UserMemory | None = Field(
        default=None, description="With a user_id, which extracted memories are the user's (scope user, read by "
        "their later conversations): profile (what they state about themselves), all, off. Default: the server's "
        "ACN_USER_MEMORY. Items keep the scope they give.")
    dedupe_threshold: float = Field(
        default=0.9, ge=0.5, le=1.0, description="Similarity at or above which a write updates.")
    redact_pii: bool = Field(
        default=False, description="Mask phone, ID-card, bank-card numbers and e-mails (content and meta) "
                                   "before storing.")


class MemoryWriteResponse(NodeResponse):
    results: list[WriteResult]
    extracted: int = Field(default=0, description="How many items came from extraction.")


def run(request: MemoryWriteRequest, deps: Deps) -> MemoryWriteResponse:
    """Write every item (explicit, then extracted), deduplicating and superseding by key."""
    memories = deps.memories
    mode = request.user_memory or deps.settings.user_memory
    extracted = extracted_for(request.messages, request.user_id, mode) if request.extract else []
    if not request.items and not (request.extract and request.messages):
        raise ValidationError("nothing to write: give items, or messages with extract: true")
    items = [*request.items, *extracted]
    if request.redact_pii:
        items = [item.model_copy(update={"content": redact_pii(item.content)[0], "meta": redact_value(item.meta)[0]})
                 for item in items]
    results = write_items(memories, deps.tenant, request, items, request.dedupe_threshold)
    return MemoryWriteResponse(results=results, extracted=len(extracted))


NODE = NodeSpec(
    name="memory_write",
    request_model=MemoryWriteRequest,
    response_model=MemoryWriteResponse,
    run=run,
    summary="Write memories (explicit or extracted) with dedup, supersede and versions",
    description=Description(
        human_en="Store facts, preferences, constraints and decisions outside the context window. "
                 "Duplicates update in place; a new value with the same key supersedes the old one.",
        human_zh="把事实、偏好、约束和决策存到上下文窗口之外。相似内容原地更新并升版本；同一 key 的新值会取代旧值。",
        llm_en="Save durable information about the user or task (identity, preferences, constraints, decisions, "
               "key numbers) so it can be retrieved in later turns. Pass items, or messages with extract=true.",
        llm_zh="保存用户或任务的持久信息（身份、偏好、约束、决策、关键数字），供后续轮次检索。"
               "传 items，或传 messages 并设 extract=true。",
    ),
)
