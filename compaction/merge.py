"""Merge the oldest segments into one when there are more than max_segments."""

from __future__ import annotations

from collections.abc import Callable

from common.models import Decision, Segment
from compaction.key_numbers import build_key_numbers, mark_earlier, union_pairs
from compaction.render import finish_segment, segment_body
from compaction.segments import segment_id
from compaction.similarity import dedupe_keep_latest, is_near_duplicate, same_topic
from text.tokens import Tokenizer


def merge_segments(
    segments: list[Segment], max_segments: int, *, tokenizer: Tokenizer, language: str
) -> list[Segment]:
    """Return segments with the oldest merged until at most max_segments remain (seed: merge >5 into one)."""
    limit = max(1, max_segments)
    result = list(segments)
    while len(result) > limit:
        # Merge a block of `limit` segments (at least two), as the seed's merge of the oldest five does.
        count = max(2, limit)
        merged = merge_group(result[:count], tokenizer=tokenizer, language=language)
        result = [merged, *result[count:]]
    return result


def merge_group(group: list[Segment], *, tokenizer: Tokenizer, language: str) -> Segment:
    """Merge consecutive segments into one spanning their turn ranges."""
    decisions = [item for segment in group for item in segment.decisions]
    kept, superseded = resolve_decisions(decisions)
    starts = [segment.turn_range[0] for segment in group if segment.turn_range]
    ends = [segment.turn_range[-1] for segment in group if segment.turn_range]
    merged = Segment(
        id="",
        turn_range=[min(starts, default=0), max(ends, default=0)],
        goal=next((segment.goal for segment in reversed(group) if segment.goal), ""),
        constraints=_merged(group, lambda segment: segment.constraints),
        done=_merged(group, lambda segment: segment.done),
        todo=_merged(group, lambda segment: segment.todo),
        decisions=kept,
        facts=_merged(group, lambda segment: segment.facts),
    )
    pairs = union_pairs([segment.key_numbers for segment in group])
    pairs = mark_earlier(pairs, superseded, [segment_body(merged)], language)
    merged = merged.model_copy(update={"key_numbers": build_key_numbers(pairs)})
    merged = merged.model_copy(update={"id": segment_id(merged)})
    return finish_segment(merged, language, tokenizer)


def _merged(group: list[Segment], items: Callable[[Segment], list[str]]) -> list[str]:
    """Return one list of the group's items, deduplicated (the oldest segment is often an earlier merge)."""
    return dedupe_keep_latest([item for segment in group for item in items(segment)], head=len(items(group[0])))


def resolve_decisions(decisions: list[Decision]) -> tuple[list[Decision], list[str]]:
    """Return (kept, superseded): a decision is dropped when a later one sets the same topic or repeats it.

    A repeated decision hands its reason to the later wording when that one states none.
    """
    kept: list[Decision] = []
    superseded: list[str] = []
    reasons: dict[int, str] = {}
    for index, decision in enumerate(decisions):
        later = next((i for i in range(index + 1, len(decisions)) if _replaces(decisions[i], decision)), None)
        reason = decision.reason or reasons.get(index)
        if later is None:
            kept.append(
                decision if reason == decision.reason else decision.model_copy(update={"reason": reason})
            )
            continue
        if reason and is_near_duplicate(decisions[later].decision, decision.decision):
            reasons.setdefault(later, reason)
        else:
            superseded.append(decision.decision)
    return kept, superseded


def _replaces(newer: Decision, older: Decision) -> bool:
    return same_topic(newer.decision, older.decision) or is_near_duplicate(newer.decision, older.decision)
