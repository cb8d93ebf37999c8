"""Compacting a session's history: options, the trigger decision, the work cap and slots, the LLM client of a
call, archiving what leaves the buffer, and the result (the compact node and record_turn both use it)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field

from acn.common.conversation import SessionState, Turn, group_turns
from acn.common.errors import BusyError, LlmBusyError, ValidationError
from acn.common.models import (
    Message,
    Namespace,
    NodeResponse,
    Segment,
    StrictModel,
    parse_json_object_or_null,
)
from acn.common.settings import Settings
from acn.compaction.caller import MAX_CALLER_ROUNDS, CallerReply, LlmPrompt, NeedsLlm, ReplayChat
from acn.compaction.engine import CompactionOutcome, compact_turns
from acn.compaction.limits import message_chars
from acn.compaction.llm import JsonChat
from acn.compaction.rollup import roll_up, summary_cap
from acn.compaction.segment_lines import render_working_summary
from acn.compaction.segments import split_recent
from acn.memory.archive import archive_turns
from acn.providers.openai_chat import ChatClient, request_endpoint
from acn.services.deps import Deps
from acn.text.tokens import Tokenizer


class LlmOverrides(StrictModel):
    """Per-request LLM endpoint, overriding the ACN_LLM_* settings (within what the operator allows)."""

    base_url: str | None = Field(
        default=None, max_length=500, pattern=r"^https?://",
        description="Refused (403 llm_url_not_allowed) unless listed in the server's ACN_LLM_ALLOWED_URLS; such a "
                    "URL gets only this request's api_key, never the server's.")
    model: str | None = Field(default=None, max_length=200,
                              description="Another model than the server's needs this request's own api_key.")
    api_key: str | None = Field(default=None, max_length=500)
    timeout_seconds: float | None = Field(
        default=None, gt=0, le=300,
        description="Lowered to the server's ACN_LLM_TIMEOUT_SECONDS (and to 60 s for a request-chosen URL).")


class CompactOptions(StrictModel):
    """When and how to compact (defaults: trigger at 40% of the window, well before the model degrades; segments of
    5–8 turns, long enough to hold a task step and short enough to summarise without losing it)."""

    context_window: int = Field(default=8000, ge=256, le=2_000_000, description="The model's window, in tokens.")
    trigger_ratio: float = Field(default=0.4, gt=0, le=1, description="Compact when history ≥ ratio × window.")
    segment_size: int = Field(default=6, ge=1, le=50, description="Turns per segment (5–8 recommended).")
    keep_recent: int = Field(default=4, ge=0, le=200, description="Most recent turns kept verbatim.")
    max_segments: int = Field(default=5, ge=1, le=100, description="Above this, the oldest segments merge.")
    wait_for_segment: bool = Field(
        default=False, description="Past the trigger, compact only once the old turns fill a segment (unless the "
        "verbatim turns alone reach half the trigger). When a long session's summary alone is over the trigger, "
        "this makes one compaction per segment_size turns instead of one per turn (an LLM call per turn with "
        "engine llm); the waiting turns stay verbatim in the buffer.")
    engine: Literal["extractive", "llm", "auto", "caller"] = Field(
        default="extractive", description="extractive (offline, default), llm, auto (llm when configured), or "
        "caller: the caller's own model answers the LLM prompts (status needs_llm carries each prompt; the compact "
        "node takes the replies in llm_replies). See docs/dify-agent.md.")
    llm: Annotated[LlmOverrides | None, BeforeValidator(parse_json_object_or_null)] = Field(
        default=None, description="Per-request LLM endpoint (else ACN_LLM_*); a JSON string works too.")


class CompactStats(StrictModel):
    tokens_before: int
    tokens_after: int
    ratio: float = Field(description="tokens_after / tokens_before (seed: healthy between 0.1 and 0.3).")
    numbers_in_source: int
    numbers_preserved: int = Field(description="Numbers the engine kept by itself, before the verifier.")
    numbers_restored: int = Field(description="Numbers the verifier put back into key_numbers.")


# waiting_for_segment: over the trigger with wait_for_segment set, but the old turns do not fill a segment yet.
# llm_busy: record_turn's compaction was due but every outbound LLM slot was taken; the next turn tries again.
# needs_llm: engine caller, and the run needs the caller's reply to `prompt`; nothing was stored.
Reason = Literal["forced", "triggered", "below_trigger", "nothing_to_compact", "waiting_for_segment", "llm_busy",
                 "needs_llm"]
# Verbatim turns past this share of the trigger are compacted without waiting for a whole segment: then they are
# what crowds the context (long turns, a large tool output), not the summary.
PARTIAL_SEGMENT_SHARE = 0.5


class CompactResponse(NodeResponse):
    compacted: bool
    reason: Reason
    segments: list[Segment]
    recent_messages: list[Message]
    working_summary: str
    stats: CompactStats
    version: int = Field(description="Session version after this call (unchanged when nothing was saved).")
    archived_ids: list[str]
    engine_used: str
    fallback_reason: str | None = None
    status: Literal["done", "needs_llm"] = Field(
        default="done", description="needs_llm (engine caller): answer `prompt` with your model and post again "
        "with the reply appended to llm_replies and expected_version = version; nothing was stored.")
    prompt: LlmPrompt | None = None


def compact_state(options: CompactOptions, state: SessionState, deps: Deps, *, persist_archive: bool,
                  force: bool = True, namespace: Namespace | None = None,
                  defer_when_busy: bool = False, bounded: bool = False,
                  replies: list[CallerReply] | None = None) -> tuple[SessionState, CompactResponse]:
    """Return the state after compaction (if triggered) and the response describing it.

    defer_when_busy: when every outbound LLM slot is taken, leave the state as it is (reason llm_busy) instead
    of raising LlmBusyError (503).
    replies: engine caller, the caller's replies so far; when the run needs another, the state is returned as it
    is with status needs_llm and the prompt (nothing archived, nothing to save).
    bounded: a stored session's state (its turns are archived): the working state is kept under its token cap
    (bounded_segments). A stateless call's segments are the caller's only copy and keep every line.
    """
    namespace = namespace or (options if isinstance(options, Namespace) else None)
    tokenizer = deps.tokenizer
    before = history_tokens(state.buffer, state.segments, tokenizer)
    old, recent = split_recent(group_turns(state.buffer, first_turn=first_free_turn(state)), options.keep_recent)
    verbatim = before - sum(s.tokens for s in state.segments)
    reason = decide(options, before, verbatim, old, force=force)
    if reason not in ("forced", "triggered"):
        return state, unchanged_response(state, reason, before)
    to_compact = old if reason == "forced" else whole_segments(old, options.segment_size)
    to_compact = within_cap(to_compact, options.segment_size, deps.settings)
    if options.engine == "caller":
        # One caller round per segment: the exchange is bounded; older turns wait for the next compaction.
        to_compact = to_compact[:MAX_CALLER_ROUNDS * options.segment_size]
    try:
        outcome = _compact_with_llm_slot(options, deps, to_compact, state, tokenizer, replies or [])
    except LlmBusyError:
        if not defer_when_busy:
            raise
        return state, unchanged_response(state, "llm_busy", before)
    except NeedsLlm as needed:
        return state, unchanged_response(state, "needs_llm", before).model_copy(
            update={"status": "needs_llm", "prompt": needed.prompt})
    # Turns recorded through record_turn were archived verbatim when they arrived.
    unarchived = [t for t in to_compact if t.number > state.archived_turn]
    archived = (archive_turns(deps.memories, deps.tenant, namespace, unarchived)
                if persist_archive and namespace and unarchived else [])
    kept = [m for t in old[len(to_compact):] + recent for m in t.messages]
    segments = (bounded_segments(options, outcome, state, to_compact if persist_archive else [], tokenizer,
                                 verbatim=history_tokens(kept, [], tokenizer)) if bounded else outcome.segments)
    new_state = state.model_copy(update={"buffer": kept, "segments": segments})
    return new_state, compacted_response(new_state, reason, before, outcome, archived, tokenizer)


def _compact_with_llm_slot(options: CompactOptions, deps: Deps, to_compact: list[Turn], state: SessionState,
                           tokenizer: Tokenizer, replies: list[CallerReply]) -> CompactionOutcome:
    """Run the engines; an LLM call holds one of the server's outbound slots for its whole run, an extractive
    one (or one answered by the caller's replies, which waits on nothing) a compaction slot (CPU-bound work)."""
    caller = options.engine == "caller"
    with chat_client(options, deps, replies) as chat, \
            compaction_slot(deps, heavy=chat is None or caller or options.engine == "extractive"):
        return compact_turns([m for t in to_compact for m in t.messages], state.segments,
                             segment_size=options.segment_size, max_segments=options.max_segments,
                             engine="llm" if caller else options.engine, chat=chat, tokenizer=tokenizer)


def bounded_segments(options: CompactOptions, outcome: CompactionOutcome, state: SessionState,
                     archived_now: list[Turn], tokenizer: Tokenizer, *, verbatim: int = 0) -> list[Segment]:
    """Return the run's segments with the oldest rolled up past the summary cap (compaction.rollup): only turns
    whose raw messages are archived (before this call, or by it) may leave the working state. `verbatim`: the
    tokens of the turns the buffer keeps (a trim's room comes out of them)."""
    archived_turn = max([state.archived_turn, *(t.number for t in archived_now)])
    cap = summary_cap(options.trigger_ratio * options.context_window)
    return roll_up(outcome.segments, cap, archived_turn, tokenizer=tokenizer, language=outcome.language,
                   verbatim=verbatim)


def decide(options: CompactOptions, tokens: int, verbatim: int, old: list[Turn], *, force: bool) -> Reason:
    """Return why compaction runs (forced/triggered) or why not.

    `tokens` is the whole history (segments and verbatim turns), `verbatim` the turns' share of it.
    """
    if not old:
        return "nothing_to_compact"
    if force:
        return "forced"
    trigger = options.trigger_ratio * options.context_window
    if tokens < trigger:
        return "below_trigger"
    if (options.wait_for_segment and len(old) < options.segment_size
            and verbatim < trigger * PARTIAL_SEGMENT_SHARE):
        return "waiting_for_segment"
    return "triggered"


def within_cap(turns: list[Turn], segment_size: int, settings: Settings) -> list[Turn]:
    """Return the oldest turns one request may compact (ACN_MAX_COMPACT_MESSAGES / _CHARS): all when they fit,
    else whole segments of them when one fits, else as many turns as fit (at least one); the rest stay verbatim
    for the next compaction. A session buffer can outgrow one request's work (record_turn with compact off, a
    large window): compacting it a part at a time keeps every call bounded and the session able to move on."""
    count = messages = chars = 0
    for turn in turns:
        messages += len(turn.messages)
        chars += message_chars(turn.messages)
        if messages > settings.max_compact_messages or chars > settings.max_compact_chars:
            break
        count += 1
    if count == len(turns):
        return turns
    whole = count - count % max(1, segment_size)
    return turns[:max(whole or count, 1)]


@contextmanager
def compaction_slot(deps: Deps, *, heavy: bool) -> Iterator[None]:
    """Hold one of the process's compaction slots for CPU-bound (extractive) work; 503 busy when none frees.

    An LLM compaction mostly waits on the network (the outbound pool bounds it) and takes no slot.
    """
    slots = deps.compaction_slots
    if slots is None or not heavy:
        yield
        return
    with slots.held() as acquired:
        if not acquired:
            raise BusyError(f"all {slots.size} compaction slots stayed busy for {slots.wait_seconds:g} s; retry later")
        yield


def whole_segments(old: list[Turn], segment_size: int) -> list[Turn]:
    """Return the oldest turns that fill whole segments (all old turns if not even one segment is full)."""
    whole = len(old) - len(old) % segment_size
    return old[:whole] if whole else old


def first_free_turn(state: SessionState) -> int:
    """Return the turn number the buffer starts from when its messages carry none."""
    covered = max((s.turn_range[-1] for s in state.segments if s.turn_range), default=0)
    return covered + 1


def history_tokens(buffer: list[Message], segments: list[Segment], tokenizer: Tokenizer) -> int:
    """Return the tokens the history costs as it stands: segments plus verbatim messages."""
    return sum(s.tokens for s in segments) + sum(tokenizer.count_message(m) for m in buffer)


def check_llm_options(options: CompactOptions, deps: Deps) -> None:
    """Refuse (403) an `llm` override the operator does not allow, before anything is read or written.

    Checked whenever overrides are given, even if this call ends up not compacting: a request that names a
    refused URL is told so at once, not on the turn its trigger fires.
    """
    if options.llm is not None:
        if options.engine == "caller":
            raise ValidationError("engine caller uses the caller's own model: it takes no llm endpoint")
        request_endpoint(deps.settings, options.llm.model_dump(exclude_none=True))


@contextmanager
def chat_client(options: CompactOptions, deps: Deps,
                replies: list[CallerReply] | None = None) -> Iterator[JsonChat | None]:
    """Yield the LLM client for this call (per-request overrides within policy, else the configured one; for
    engine caller, the caller's replies).

    While an endpoint's client is in use it holds an outbound slot (LlmGate): LlmBusyError when none is free.
    """
    if options.engine == "extractive":
        yield None
        return
    if options.engine == "caller":
        yield ReplayChat(replies or [])
        return
    overrides = options.llm.model_dump(exclude_none=True) if options.llm else {}
    client = ChatClient.for_request(deps.settings, overrides) if overrides else None
    chat = client if overrides else deps.chat
    gate = deps.llm_gate
    try:
        if chat is None or gate is None:
            yield chat
            return
        with gate.slot():
            yield chat
    finally:
        if client is not None:
            client.close()


def unchanged_response(state: SessionState, reason: Reason, tokens: int) -> CompactResponse:
    stats = CompactStats(tokens_before=tokens, tokens_after=tokens, ratio=1.0, numbers_in_source=0,
                         numbers_preserved=0, numbers_restored=0)
    return CompactResponse(compacted=False, reason=reason, segments=state.segments, recent_messages=state.buffer,
                           working_summary=render_working_summary(state.segments), stats=stats,
                           version=state.version, archived_ids=[], engine_used="none")


def compacted_response(state: SessionState, reason: Reason, before: int, outcome: CompactionOutcome,
                       archived: list[str], tokenizer: Tokenizer) -> CompactResponse:
    after = history_tokens(state.buffer, state.segments, tokenizer)
    stats = CompactStats(tokens_before=before, tokens_after=after, ratio=round(after / before, 4) if before else 1.0,
                         numbers_in_source=outcome.numbers_in_source, numbers_preserved=outcome.numbers_preserved,
                         numbers_restored=outcome.numbers_restored)
    return CompactResponse(compacted=True, reason=reason, segments=state.segments, recent_messages=state.buffer,
                           working_summary=render_working_summary(state.segments), stats=stats,
                           version=state.version, archived_ids=archived, engine_used=outcome.engine_used,
                           fallback_reason=outcome.fallback_reason)
