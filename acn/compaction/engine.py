"""Compact turns into segments with the chosen engine, verify them, and merge old segments."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from acn.common.conversation import Turn, group_turns
from acn.common.errors import ProviderError, ProviderTimeoutError, ValidationError
from acn.common.models import Message, Segment
from acn.compaction.extractive import source_numbers, summarize_extractive
from acn.compaction.grounding import Source, grounding_problems
from acn.compaction.llm import JsonChat, summarize_llm
from acn.compaction.merge import merge_segments
from acn.compaction.segment_lines import finish_segment
from acn.compaction.segments import cut_segments, next_turn_number, segment_id, user_sentences
from acn.compaction.state import WorkingState, working_state
from acn.compaction.statements import topic_keys_cached
from acn.compaction.verify import self_check, verify_numbers
from acn.text.lang import detect_language
from acn.text.tokens import Tokenizer

log = logging.getLogger("acn.compaction")
ENGINES = ("extractive", "llm", "auto")
Summarizer = Callable[[list[Turn], WorkingState, str], Segment]


@dataclass
class CompactionOutcome:
    """What one compaction run produced."""

    segments: list[Segment]  # all segments after this run (previous + new, merged if needed)
    new_segment_ids: list[str]
    engine_used: str  # "extractive" | "llm"
    fallback_reason: str | None  # why the LLM engine was not used, if it was asked for
    numbers_in_source: int
    numbers_preserved: int  # before restoration by the verifier
    numbers_restored: int
    language: str = "en"  # what the segments are rendered in


@dataclass
class _Run:
    """New segments of one engine run, with number counts."""

    segments: list[Segment]
    in_source: int = 0
    preserved: int = 0
    restored: int = 0


class _SelfCheckError(Exception):
    """Internal: an LLM segment lost the previous goal or a constraint, or is not grounded in its turns.

    Its message names only the kinds of problem: the details quote the LLM's text, which goes to the log, not
    to the caller (fallback_reason).
    """

    def __init__(self, problems: list[str]) -> None:
        kinds = dict.fromkeys(problem.split(":", 1)[0] if " lost" in problem.split(":", 1)[0] else problem
                              for problem in problems)
        super().__init__("; ".join(kinds))
        log.warning("LLM segment refused", extra={"problems": problems})


def compact_turns(
    messages: list[Message],
    previous: list[Segment],
    *,
    segment_size: int,
    max_segments: int,
    engine: str,
    chat: JsonChat | None,
    tokenizer: Tokenizer,
    language: str | None = None,
) -> CompactionOutcome:
    """Compact messages into segments of segment_size turns after the previous segments.

    Args:
        messages: the turns to compact (the caller has already set aside the turns kept verbatim).
        previous: the session's existing segments, oldest first.
        engine: "extractive", "llm", or "auto" (llm when chat is given, else extractive).
        chat: the client the llm engine uses; None when no endpoint is configured.

    Raises:
        ValidationError: engine is not one of ENGINES.
    """
    if engine not in ENGINES:
        raise ValidationError(f"engine must be one of {', '.join(ENGINES)}, not {engine!r}")
    with topic_keys_cached():
        return _compact(messages, previous, segment_size=segment_size, max_segments=max_segments, engine=engine,
                        chat=chat, tokenizer=tokenizer, language=language)


def _compact(messages: list[Message], previous: list[Segment], *, segment_size: int, max_segments: int,
             engine: str, chat: JsonChat | None, tokenizer: Tokenizer, language: str | None) -> CompactionOutcome:
    turns = group_turns(messages, first_turn=next_turn_number(previous))
    lang = language or conversation_language(turns)
    chunks = cut_segments(turns, segment_size)
    run, engine_used, fallback_reason = _run_engines(chunks, previous, engine, chat, lang, tokenizer)
    merged = merge_segments([*previous, *run.segments], max_segments, tokenizer=tokenizer, language=lang)
    previous_ids = {segment.id for segment in previous}
    return CompactionOutcome(
        segments=merged,
        new_segment_ids=[segment.id for segment in merged if segment.id not in previous_ids],
        engine_used=engine_used,
        fallback_reason=fallback_reason,
        numbers_in_source=run.in_source,
        numbers_preserved=run.preserved,
        numbers_restored=run.restored,
        language=lang,
    )


def _run_engines(
    chunks: list[list[Turn]],
    previous: list[Segment],
    engine: str,
    chat: JsonChat | None,
    lang: str,
    tokenizer: Tokenizer,
) -> tuple[_Run, str, str | None]:
    """Run the LLM engine when asked for and possible, else (or on its failure) the extractive one."""
    extractive = partial(_run, chunks, previous, summarize_extractive, lang, tokenizer, check=False)
    if engine == "extractive" or (engine == "auto" and chat is None):
        return extractive(), "extractive", None
    if chat is None:
        return extractive(), "extractive", "no LLM endpoint configured"

    def with_llm(turns: list[Turn], state: WorkingState, language: str) -> Segment:
        return summarize_llm(turns, state, language, chat)

    try:
        return _run(chunks, previous, with_llm, lang, tokenizer, check=True), "llm", None
    except ProviderTimeoutError as error:
        reason = f"LLM timed out: {error.message}"
    except ProviderError as error:
        reason = f"LLM failed: {error.message}"
    except _SelfCheckError as error:
        reason = f"LLM summary failed the self-check: {error}"
    log.info("LLM engine fell back to extractive", extra={"reason": reason})
    return extractive(), "extractive", reason


def _run(
    chunks: list[list[Turn]],
    previous: list[Segment],
    summarize: Summarizer,
    lang: str,
    tokenizer: Tokenizer,
    *,
    check: bool,
) -> _Run:
    """Summarize each chunk in order, carrying the working state, then verify and finish each segment."""
    run = _Run(segments=[])
    for turns in chunks:
        history = [*previous, *run.segments]
        state = working_state(history)
        draft = summarize(turns, state, lang)
        if check:
            # What the LLM may draw on: these turns and the segments before them (its prompt carries their state).
            problems = (grounding_problems(draft, Source.of(turns, history))
                        or self_check(history, [draft], user_sentences(turns)))
            if problems:
                raise _SelfCheckError(problems)
        verified = verify_numbers(draft, source_numbers(turns))
        run.in_source += verified.in_source
        run.preserved += verified.preserved
        run.restored += verified.restored
        segment = verified.segment.model_copy(update={"id": segment_id(verified.segment)})
        run.segments.append(finish_segment(segment, lang, tokenizer, inherited=state))
    return run


def conversation_language(turns: list[Turn]) -> str:
    """Return the language of the users' messages (of all messages when users wrote nothing)."""
    users = "\n".join(m.content for turn in turns for m in turn.messages if m.role == "user")
    return detect_language(users or "\n".join(turn.text for turn in turns))
