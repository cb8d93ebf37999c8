"""Dify Agent V2 external memory: the `memory_prepare` and `memory_observe` callbacks over our memory.

The contract is Dify's (dify-agent/docs/dify-agent/external-memory.md in langgenius/dify): each callback gets
`memory_context` {app_id, subject_kind, subject_id} and a `request`. Prepare answers recall as text whose exact
UTF-8 size is `content_bytes` and never over `max_bytes`, or `status: empty`. Observe gets one lifecycle event
at a time (user_prompt, model_response, tool_call, tool_result, run_end) and records it as a message of the
run's session through record_turn, so a user prompt opens a turn and what follows joins it; a redelivered
`event_id` is stored once. Mapping: app_id → agent, subject → user (`user_of`: a business subject gets its own
prefix, and a user id that begins with that prefix is escaped, so no two subjects share a user), the run → a
session (an event that names no run: the subject's own default session, `default_run`).
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from acn.common.models import IDENTIFIER_PATTERN, INT64_MAX, Message, Namespace, NodeResponse
from acn.memory.lines import render_memory
from acn.nodes.spec import Description, NodeSpec
from acn.recording.record_turn import RecordTurnRequest, record
from acn.retrieval.hybrid_rank import MAX_QUERY_CHARS, MemoryRetrieveRequest, cut, rank
from acn.services.deps import Deps
from acn.text.lang import detect_language

# Dify's configured limits (`max_bytes`, `capture_max_bytes`) accept 512 through 32768.
MIN_BYTES = 512
MAX_BYTES = 32768
# Memories offered to prepare before the byte budget cuts; each one cut to this many tokens.
PREPARE_TOP_K = 12
PREPARE_ITEM_TOKENS = 300
# The run's session when the event's metadata names no run, followed by the subject's user (user_of): all of a
# subject's runs then share one session, and no two subjects do.
DEFAULT_RUN = "dify-agent-run"
RUN_KEYS = ("run_id", "conversation_id", "session_id")
BUSINESS_PREFIX = "business:"


class DifyShape(BaseModel):
    """Dify's side of the contract: fields it may add later are ignored, not refused (a refusal would disable
    memory for the whole run); the fields we read are still checked."""

    model_config = ConfigDict(extra="ignore")


class MemoryContext(DifyShape):
    app_id: str = Field(pattern=IDENTIFIER_PATTERN, description="The Dify app: our agent id.")
    subject_kind: Literal["user", "business"] = Field(description="user: the run's user; business: a shared id.")
    subject_id: str = Field(pattern=IDENTIFIER_PATTERN, max_length=100, description="The user or business id.")


class PrepareBody(DifyShape):
    query: str = Field(default="", max_length=4 * MAX_QUERY_CHARS, description="The run's user prompt.")
    max_bytes: int = Field(default=8000, ge=MIN_BYTES, le=MAX_BYTES, description="Most UTF-8 bytes to answer.")


def as_payload_object(value: Any) -> Any:
    """Return the payload as an object: the contract does not fix its shape, so plain text and other JSON values
    are wrapped rather than refused (a refusal would disable memory for the rest of the run)."""
    if value is None or isinstance(value, dict):
        return value
    return {"text": value} if isinstance(value, str) else {"value": value}


class ObserveBody(DifyShape):
    event_id: str = Field(min_length=1, max_length=200, description="Delivery id: a retried event repeats it.")
    event: Literal["user_prompt", "model_response", "tool_call", "tool_result", "run_end"]
    # Kept in the message's meta: the store holds 64-bit integers, so a larger one is a 422 here, not a 500 there.
    sequence: int = Field(default=0, ge=0, le=INT64_MAX, description="Order of the event within its run.")
    payload: Annotated[dict[str, Any] | None, BeforeValidator(as_payload_object)] = Field(
        default=None, description="The event's content, bounded by Dify: an object (text alone is taken as "
                                  "{\"text\": …}, any other JSON value as {\"value\": …}).")
    metadata: dict[str, Any] = Field(default_factory=dict, description="Run facts Dify adds (run id when given).")
    max_bytes: int = Field(default=8192, ge=MIN_BYTES, le=MAX_BYTES, description="Most UTF-8 bytes kept.")


class MemoryPrepareRequest(DifyShape):
    """Recall for the start of a Dify agent run (Agent V2 external memory `prepare`)."""

    memory_context: MemoryContext
    request: PrepareBody


class MemoryObserveRequest(DifyShape):
    """One event of a Dify agent run (Agent V2 external memory `observe`)."""

    memory_context: MemoryContext
    request: ObserveBody


class MemoryPrepareResponse(NodeResponse):
    status: Literal["ready", "empty"]
    content: str | None = Field(description="The recalled memories, one tagged line each; null when empty.")
    content_bytes: int = Field(description="The exact UTF-8 size of content (0 when empty).")


class MemoryObserveResponse(NodeResponse):
    status: Literal["accepted"] = "accepted"
    recorded: bool = Field(description="False for run_end and for a redelivered event (already stored).")
    session_id: str = Field(description="The session the run's events go to.")
    turn: int = Field(description="The session's turn after this event (0 when nothing was recorded).")


def user_of(context: MemoryContext) -> str:
    """Return our user id for the subject: one per (kind, id), whatever the id holds.

    - a business: BUSINESS_PREFIX + id. An id begins with a letter or a digit (IDENTIFIER_PATTERN), so the
      character after the prefix is never ':';
    - a user whose id begins with the prefix (`business:acme`): the prefix, ':' and the rest (`business::acme`).
      The character after the prefix is ':', so no business lands there (before, this user was the business
      `acme`: it read the business's memory and its writes were served to the business);
    - any other user: the id itself, the user_id the other nodes take for the same person.
    """
    subject = context.subject_id
    if context.subject_kind == "business":
        return BUSINESS_PREFIX + subject
    if subject.startswith(BUSINESS_PREFIX):
        return BUSINESS_PREFIX + ":" + subject[len(BUSINESS_PREFIX):]
    return subject


def fit_bytes(lines: list[str], max_bytes: int) -> str:
    """Return the leading whole lines that fit in max_bytes of UTF-8; a first line too long is cut at a
    character boundary (never inside a multi-byte character)."""
    kept: list[str] = []
    size = 0
    for line in lines:
        extra = len(line.encode("utf-8")) + (1 if kept else 0)
        if size + extra > max_bytes:
            if not kept:
                kept.append(line.encode("utf-8")[:max_bytes].decode("utf-8", errors="ignore"))
            break
        kept.append(line)
        size += extra
    return "\n".join(kept)


def prepare(request: MemoryPrepareRequest, deps: Deps) -> MemoryPrepareResponse:
    """Retrieve the subject's memories for the query and answer them within max_bytes."""
    context, body = request.memory_context, request.request
    # The run's own history is the runtime's: recall reads what outlives a run (user, agent and shared memories).
    retrieve = MemoryRetrieveRequest(agent_id=context.app_id, session_id=default_run(context),
                                     user_id=user_of(context), query=body.query[-MAX_QUERY_CHARS:],
                                     scopes=["user", "agent", "shared"], top_k=PREPARE_TOP_K,
                                     max_item_tokens=PREPARE_ITEM_TOKENS)
    language = detect_language(body.query or "")
    chosen = [cut(r.result(), PREPARE_ITEM_TOKENS, deps.tokenizer) for r in rank(retrieve, deps)[:PREPARE_TOP_K]]
    content = fit_bytes([render_memory(m, language) for m in chosen], body.max_bytes)
    if not content:
        return MemoryPrepareResponse(status="empty", content=None, content_bytes=0)
    return MemoryPrepareResponse(status="ready", content=content, content_bytes=len(content.encode("utf-8")))


def default_run(context: MemoryContext) -> str:
    """Return the subject's session for events that name no run (sessions are the app's, not a user's: one name
    for every subject made them all one session, their turns and event ids mixed)."""
    return f"{DEFAULT_RUN}:{user_of(context)}"


def run_session(metadata: dict[str, Any], context: MemoryContext) -> str:
    """Return the session of the event's run: the first run id the metadata carries that is a valid id, else the
    subject's own default session."""
    for key in RUN_KEYS:
        value = metadata.get(key)
        if isinstance(value, str) and re.fullmatch(IDENTIFIER_PATTERN, value):
            return value
    return default_run(context)


def payload_text(payload: dict[str, Any] | None, keys: tuple[str, ...]) -> str:
    """Return the payload's text: the first string field named in keys, else the payload as JSON."""
    for key in keys:
        if isinstance((payload or {}).get(key), str):
            return str((payload or {})[key])
    return "" if payload is None else json.dumps(payload, ensure_ascii=False, sort_keys=True)


def bounded(text: str, max_bytes: int) -> str:
    """Return text cut to max_bytes of UTF-8 at a character boundary (the provider may truncate again)."""
    data = text.encode("utf-8")
    return text if len(data) <= max_bytes else data[:max_bytes].decode("utf-8", errors="ignore")


def event_message(body: ObserveBody) -> Message | None:
    """Return the message an event adds to its session (None for run_end)."""
    payload = body.payload
    fields = payload or {}
    meta = {"source": "dify_external_memory", "event": body.event, "event_id": body.event_id,
            "sequence": body.sequence}
    name = str(fields.get("tool_name") or fields.get("name") or "tool")[:128]
    # Without an id in the payload a call and its result pair up by the tool's name (calls are serialized).
    call_id = str(fields.get("tool_call_id") or fields.get("id") or f"call_{name}")[:200]
    if body.event == "user_prompt":
        text = payload_text(payload, ("text", "content", "prompt", "query"))
        return Message(role="user", content=bounded(text, body.max_bytes), meta=meta)
    if body.event == "model_response":
        text = payload_text(payload, ("text", "content", "output"))
        return Message(role="assistant", content=bounded(text, body.max_bytes), meta=meta)
    if body.event == "tool_call":
        arguments = fields.get("arguments", fields.get("args", fields.get("input", {})))
        arguments_text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        call = {"id": call_id, "type": "function",
                "function": {"name": name, "arguments": bounded(arguments_text, body.max_bytes)}}
        return Message(role="assistant", content="", tool_calls=[call], meta=meta)
    if body.event == "tool_result":
        text = payload_text(payload, ("result", "output", "content", "text"))
        return Message(role="tool", content=bounded(text, body.max_bytes), tool_call_id=call_id, name=name,
                       meta=meta)
    return None


def observe(request: MemoryObserveRequest, deps: Deps) -> MemoryObserveResponse:
    """Record one event as a message of the run's session, once per event_id."""
    context, body = request.memory_context, request.request
    namespace = Namespace(agent_id=context.app_id, session_id=run_session(body.metadata, context),
                          user_id=user_of(context))
    message = event_message(body)
    if message is None:
        return MemoryObserveResponse(recorded=False, session_id=namespace.session_id, turn=0)
    turn = RecordTurnRequest(**namespace.model_dump(), messages=[message])
    # Each run is a session of its own: what it teaches about the subject is kept at the user's scope.
    recorded = record(turn, deps, event_id=body.event_id, memory_scope="user")
    return MemoryObserveResponse(recorded=recorded is not None, session_id=namespace.session_id,
                                 turn=recorded.turn if recorded is not None else 0)


PREPARE = NodeSpec(
    name="memory_prepare",
    request_model=MemoryPrepareRequest,
    response_model=MemoryPrepareResponse,
    run=prepare,
    summary="Dify Agent V2 external memory: recall for a run, within max_bytes",
    description=Description(
        human_en="External memory for Dify's Agent V2 runtime (prepare): the subject's memories relevant to the "
                 "run's prompt, as text of at most max_bytes UTF-8 bytes, or status empty.",
        human_zh="Dify Agent V2 外部记忆（prepare）：按本次运行的提问召回该主体的记忆，文本不超过 max_bytes 字节；"
                 "没有时返回 empty。",
        llm_en="Recall the memories relevant to this run (Dify external memory callback).",
        llm_zh="召回与本次运行相关的记忆（Dify 外部记忆回调）。",
    ),
)

OBSERVE = NodeSpec(
    name="memory_observe",
    request_model=MemoryObserveRequest,
    response_model=MemoryObserveResponse,
    run=observe,
    summary="Dify Agent V2 external memory: record one run event, once per event_id",
    description=Description(
        human_en="External memory for Dify's Agent V2 runtime (observe): records user prompts, model responses, "
                 "tool calls and results as the run's turns (memories extracted, compaction when due); a "
                 "redelivered event is stored once.",
        human_zh="Dify Agent V2 外部记忆（observe）：把用户提问、模型回复、工具调用与结果记为本次运行的对话轮次"
                 "（抽取记忆，必要时压缩）；重复投递的事件只存一次。",
        llm_en="Record one event of this run (Dify external memory callback).",
        llm_zh="记录本次运行的一个事件（Dify 外部记忆回调）。",
    ),
)

NODES = [PREPARE, OBSERVE]
