"""Recording a turn, the record_turn node's pipeline (acn/nodes/record_turn.py is the node over it): append,
archive verbatim, edit the buffer, extract memories, compact if due; external callers (Dify's external memory)
record events through `record`."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from acn.common.conversation import OBSERVED_EVENTS_KEPT, SessionState, group_turns, number_messages
from acn.common.errors import BusyError, ConflictError, TurnAheadError, ValidationError
from acn.common.models import (
    MAX_TURN,
    MAX_VERSION,
    Memory,
    Message,
    MessageList,
    Namespace,
    NodeResponse,
    Scope,
    StrictModel,
    parse_json_object,
)
from acn.compaction.caller import LlmPrompt
from acn.compaction.limits import check_work
from acn.compaction.session import CompactOptions, CompactStats, check_llm_options, compact_state
from acn.editing.edit import Edit, EditRules, edit_messages, redact_message
from acn.memory.archive import archive_batch, discard_archive
from acn.memory.durable import UserMemory, extracted_for
from acn.memory.items import MemoryItem, WriteResult
from acn.memory.write import extracted_items, write_items
from acn.services.deps import Deps


class RecordTurnRequest(Namespace):
    """The new messages of one turn (user, assistant, tool), to add to the session."""

    messages: MessageList = Field(min_length=1, max_length=500)
    expected_version: int | None = Field(default=None, ge=0, le=MAX_VERSION, description="409 if the session moved on.")
    edit: bool = Field(default=True, description="Edit the buffer by `rules` (pleasantries, duplicates, tool output).")
    rules: Annotated[EditRules, BeforeValidator(parse_json_object)] = Field(default_factory=EditRules)
    protect_last: int = Field(default=2, ge=0, le=1000, description="Turns the edit never touches.")
    extract: bool = Field(default=True, description="Write memory events found in the new messages.")
    dedupe_threshold: float = Field(default=0.9, ge=0.5, le=1.0)
    redact_pii: bool = Field(default=False, description="Mask personal data in memories and the buffer.")
    user_memory: UserMemory | None = Field(
        default=None, description="With a user_id, which extracted memories are the user's (scope user, read by "
        "their later conversations): profile (what they state about themselves), all, off. Default: the server's "
        "ACN_USER_MEMORY.")
    compact: bool = Field(default=True, description="Compact when the trigger is reached.")
    compaction: Annotated[CompactOptions, BeforeValidator(parse_json_object)] = Field(default_factory=CompactOptions)


class CompactionSummary(StrictModel):
    compacted: bool
    reason: str
    segments: int
    stats: CompactStats
    archived_ids: list[str]
    engine_used: str
    fallback_reason: str | None = None
    prompt: LlmPrompt | None = Field(
        default=None, description="Reason needs_llm (engine caller): the turn is stored, not compacted; answer this "
        "prompt with your model and call compact with engine caller, llm_replies and expected_version = version.")


class RecordTurnResponse(NodeResponse):
    version: int = Field(description="The session's new version.")
    turn: int = Field(description="Number of the turn just recorded.")
    buffer_messages: int
    buffer_tokens: int
    archived_ids: list[str] = Field(description="The raw messages of this call, archived as `turn` memories.")
    edits: list[Edit]
    memories: list[WriteResult]
    compaction: CompactionSummary


def record(request: RecordTurnRequest, deps: Deps, *, event_id: str | None = None,
           memory_scope: Scope = "session") -> RecordTurnResponse | None:
    """Record one turn; with an event id (an external caller's delivery id), a session that already holds that
    id records nothing and None is returned: a redelivered event is stored once (the check and the commit
    share the session lock). Extracted memories get memory_scope (a caller whose sessions are single runs
    keeps them at the user's scope, where the next run finds them)."""
    sessions = deps.sessions
    if request.compact:
        check_llm_options(request.compaction, deps)  # a refused LLM override changes nothing stored
    # A turn more than one request may compact is refused before anything is archived or stored.
    check_work(request.messages, max_messages=deps.settings.max_compact_messages,
               max_chars=deps.settings.max_compact_chars)
    with sessions.locked(deps.tenant, request):
        state = sessions.head(deps.tenant, request)
        if request.expected_version is not None and request.expected_version != state.version:
            raise ConflictError(f"session is at version {state.version}, not {request.expected_version}: "
                                "reload and retry")
        if event_id is not None and event_id in state.observed_events:
            return None
        incoming = numbered(request.messages, state.turn, request.redact_pii)
        if sessions.archiving_left(deps.tenant, request):
            # A request killed between its archive write and its commit: its rows are under turn numbers this
            # turn is about to take, and were never acknowledged.
            deps.memories.delete_turns_after(deps.tenant, request, state.turn)
        sessions.begin_archive(deps.tenant, request, state)
        rows, created = archive_batch(deps.memories, deps.tenant, request, group_turns(incoming, state.turn + 1))
        archived = [row.id for row in rows]
        try:
            buffer, edits = edited_buffer(request, [*state.buffer, *incoming], deps)
            turn = max(m.turn or 0 for m in incoming)
            observed = ([*state.observed_events, event_id][-OBSERVED_EVENTS_KEPT:] if event_id is not None
                        else state.observed_events)
            state = state.model_copy(update={"buffer": buffer, "turn": turn, "archived_turn": turn,
                                             "observed_events": observed})
            # The archive rows are saved with the extracted memories (one write), before the commit as before.
            memories = write_memories(request, incoming, deps, memory_scope, archive=(rows, created))
            state, compaction = maybe_compact(request, state, deps)
            saved = sessions.commit(deps.tenant, request, state, reason="record_turn")
        except Exception:
            # A turn whose commit is refused (409 lease_lost on a stalled replica, 503) was never recorded: its
            # archive rows would otherwise be served by recall, and twice once the client retries.
            discard_archive(deps.memories, deps.tenant, created)
            raise
    tokens = sum(deps.tokenizer.count_message(m) for m in saved.buffer)
    return RecordTurnResponse(version=saved.version, turn=turn, buffer_messages=len(saved.buffer),
                              buffer_tokens=tokens, archived_ids=archived, edits=edits, memories=memories,
                              compaction=compaction)


def numbered(messages: list[Message], last_turn: int, redact: bool) -> list[Message]:
    """Return the messages with turn numbers: a user message opens the next turn, others join it."""
    result = []
    for index, (turn, message) in enumerate(number_messages(messages, last_turn)):
        if turn > MAX_TURN:
            # model_copy does not validate: without this check a state that cannot be read back is stored.
            raise ValidationError(f"turn numbers are exhausted for this session (limit {MAX_TURN})")
        if message.turn is not None and message.turn > turn:
            # A client's number may repeat the server's, never run ahead of it: one message saying turn 10^9 made
            # every later turn that large, and the session page drew a cell per number (gigabytes).
            raise TurnAheadError(f"messages[{index}].turn: {message.turn} runs ahead of the session (this message "
                                 f"is turn {turn}); omit turn to let the server number it",
                                 [f"messages.{index}.turn: at most {turn}"])
        if redact:  # content, name, meta and tool-call arguments alike
            message = redact_message(message)[0]
        result.append(message.model_copy(update={"turn": turn}))
    return result


def edited_buffer(request: RecordTurnRequest, buffer: list[Message], deps: Deps) -> tuple[list[Message], list[Edit]]:
    """Return the buffer after the edit rules (the raw messages are already archived)."""
    if not request.edit:
        return buffer, []
    # The buffer may hold more messages than an edit_context request may carry (5,000) when compaction is off:
    # the edit runs on the list itself, not through the node's request model.
    return edit_messages(buffer, request.rules, request.protect_last, deps.tokenizer)


def write_memories(request: RecordTurnRequest, incoming: list[Message], deps: Deps, scope: Scope = "session", *,
                   archive: tuple[list[Memory], set[str]] | None = None) -> list[WriteResult]:
    """Write the events extracted from the new messages (with `extract`), deduplicated against what is stored;
    with a user_id, the user's own at scope user (acn/memory/durable.py). `archive`: the turn's archive rows and
    the ids among them to insert, saved in the same write."""
    rows, created = archive or ([], set())
    items: list[MemoryItem] = []
    if request.extract and scope != "session":  # a caller that keeps every extracted memory at one scope
        items = [item.model_copy(update={"scope": scope}) for item in extracted_items(incoming)]
    elif request.extract:
        items = extracted_for(incoming, request.user_id, request.user_memory or deps.settings.user_memory)
    if not items:
        if rows:
            deps.memories.save(deps.tenant, rows, new_ids=created)
        return []
    return write_items(deps.memories, deps.tenant, request, items, request.dedupe_threshold, carry=rows,
                       carry_new=created)


def maybe_compact(request: RecordTurnRequest, state: SessionState, deps: Deps) -> tuple[SessionState,
                                                                                       CompactionSummary]:
    """Compact the buffer when the trigger is reached; archives already exist, so none are written."""
    if not request.compact:
        stats = CompactStats(tokens_before=0, tokens_after=0, ratio=1.0, numbers_in_source=0, numbers_preserved=0,
                             numbers_restored=0)
        return state, CompactionSummary(compacted=False, reason="disabled", segments=len(state.segments),
                                        stats=stats, archived_ids=[], engine_used="none")
    try:
        # Busy LLM slots must not fail the turn (it would be lost to the caller): compaction waits for a later turn.
        new_state, response = compact_state(request.compaction, state, deps, persist_archive=True, force=False,
                                            namespace=request, defer_when_busy=True, bounded=True)
    except BusyError:
        # The turn is recorded either way; its compaction is left to a later turn (the buffer keeps the turns).
        stats = CompactStats(tokens_before=0, tokens_after=0, ratio=1.0, numbers_in_source=0, numbers_preserved=0,
                             numbers_restored=0)
        return state, CompactionSummary(compacted=False, reason="busy", segments=len(state.segments), stats=stats,
                                        archived_ids=[], engine_used="none")
    return new_state, CompactionSummary(compacted=response.compacted, reason=response.reason,
                                        segments=len(new_state.segments), stats=response.stats,
                                        archived_ids=response.archived_ids, engine_used=response.engine_used,
                                        fallback_reason=response.fallback_reason, prompt=response.prompt)
