"""Compact: segmented, structured compaction of old turns; raw turns archived, numbers verified."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from acn.common.conversation import SessionState
from acn.common.errors import ConflictError, ValidationError
from acn.common.models import MAX_VERSION, MessageList, Namespace, parse_json_string
from acn.compaction.caller import MAX_CALLER_ROUNDS, CallerReply
from acn.compaction.limits import check_work
from acn.compaction.session import CompactOptions, CompactResponse, check_llm_options, compact_state
from acn.nodes.spec import Description, NodeSpec
from acn.services.deps import Deps


class CompactRequest(Namespace, CompactOptions):
    """Compact the session buffer (or the given messages)."""

    messages: MessageList | None = Field(
        default=None, max_length=5000,
        description="Messages to compact statelessly; omit to compact the server-side session buffer.")
    force: bool = Field(default=False, description="Compact now, whatever the trigger says.")
    persist: bool = Field(default=True, description="Archive raw turns and save the new working state.")
    expected_version: int | None = Field(default=None, ge=0, le=MAX_VERSION,
                                         description="Fail with 409 if the session moved on.")
    llm_replies: Annotated[list[CallerReply] | None, BeforeValidator(parse_json_string)] = Field(
        default=None, max_length=MAX_CALLER_ROUNDS,
        description="Engine caller: your model's replies to the prompts of earlier needs_llm answers, in order. "
                    "With the session buffer, expected_version is required (the prompts are the state's).")


def check_caller(request: CompactRequest) -> None:
    """Refuse replies outside engine caller, and replies for a session not pinned to a version."""
    if not request.llm_replies:  # none yet: the first round of an exchange
        return
    if request.engine != "caller":
        raise ValidationError("llm_replies go with engine caller")
    if request.messages is None and request.expected_version is None:
        raise ValidationError("llm_replies answer the prompts of one session version: give expected_version")


def run(request: CompactRequest, deps: Deps) -> CompactResponse:
    """Compact the given messages, or the session buffer under the session lock."""
    check_llm_options(request, deps)
    check_caller(request)
    if request.messages is not None:
        # Refused before anything is archived; the session buffer is instead compacted a capped part at a time.
        check_work(request.messages, max_messages=deps.settings.max_compact_messages,
                   max_chars=deps.settings.max_compact_chars)
        state = SessionState(buffer=request.messages)
        return compact_state(request, state, deps, persist_archive=request.persist, force=request.force,
                             replies=request.llm_replies)[1]
    sessions = deps.sessions
    with sessions.locked(deps.tenant, request):
        state = sessions.head(deps.tenant, request)
        if request.engine == "caller" and request.expected_version not in (None, state.version):
            # Checked before the run: the replies answer the prompts of that version, not of this one.
            raise ConflictError(f"session is at version {state.version}, not {request.expected_version}: "
                                "start the exchange again")
        new_state, response = compact_state(request, state, deps, persist_archive=request.persist, force=request.force,
                                            replies=request.llm_replies, bounded=request.persist)
        if response.compacted and request.persist:
            saved = sessions.commit(deps.tenant, request, new_state, reason="compact",
                                    expected_version=request.expected_version)
            response.version = saved.version
        return response


NODE = NodeSpec(
    name="compact",
    request_model=CompactRequest,
    response_model=CompactResponse,
    run=run,
    summary="Compact old turns into structured, turn-ranged segments; every number kept",
    description=Description(
        human_en="Segmented compaction: old turns become structured segments (goal, constraints, done, todo, "
                 "decisions, facts, key numbers) tagged with their turn range. Every number survives (verified); "
                 "the raw turns are archived, never lost. Offline by default; an OpenAI-compatible LLM is optional.",
        human_zh="分段结构化压缩：旧轮次压成带轮次范围的结构化摘要（目标、约束、已完成、待办、决策、事实、关键数字）。"
                 "所有数字经校验保留；原始轮次归档不丢失。默认离线抽取，可选接入 OpenAI 兼容的 LLM。",
        llm_en="Compress the conversation history when it grows long. Returns segments and a working_summary to "
               "put in the system prompt, plus the recent messages kept verbatim.",
        llm_zh="对话历史变长时压缩它。返回分段摘要和可放入系统提示词的 working_summary，以及原样保留的最近消息。",
    ),
)
