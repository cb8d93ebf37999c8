"""Merge the oldest segments into one when there are more than max_segments."""

from __future__ import annotations

from collections.abc import Callable

from acn.common.models import Decision, Segment
from acn.compaction.key_numbers import build_key_numbers, mark_earlier, union_pairs
from acn.compaction.segment_lines import finish_segment, segment_body
from acn.compaction.segments import segment_id
from acn.compaction.statements import NearIndex, TopicIndex, dedupe_keep_latest, is_near_duplicate, topic_key
from acn.text.tokens import Tokenizer


def merge_segments(
    segments: list[Segment], max_segments: int, *, tokenizer: Tokenizer, language: str
) -> list[Segment]:
    """Return segments with the oldest merged until at most max_segments remain (seed: merge >5 into one)."""
    limit = max(1, max_segments)
    result = list(segments)
    resolved = False  # result[0] is a merge of this call: its decisions are resolved
    while len(result) > limit:
        # Merge a block of `limit` segments (at least two), as the seed's merge of the oldest five does.
        count = max(2, limit)
        # Only the last merge is kept: the ones before it are rendered and counted by none (its input only).
        merged = merge_group(result[:count], tokenizer=tokenizer, language=language, resolved=resolved,
                             finish=len(result) - count + 1 <= limit)
        resolved = True
        result = [merged, *result[count:]]
    return result


def merge_group(group: list[Segment], *, tokenizer: Tokenizer, language: str, resolved: bool = False,
                finish: bool = True) -> Segment:
    """Merge consecutive segments into one spanning their turn ranges.

    `resolved`: the first segment's decisions are what resolve_decisions kept (a merge of the same call), so
    only the other segments' decisions are searched for replacements. Without `finish` the text is not
    rendered, its tokens counted nor its id computed (a merge that the next merge of the same call consumes).
    """
    decisions = [item for segment in group for item in segment.decisions]
    kept, superseded = resolve_decisions(decisions, head=len(group[0].decisions) if resolved else 0)
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
    if not finish:
        return merged
    merged = merged.model_copy(update={"id": segment_id(merged)})
    return finish_segment(merged, language, tokenizer)


def _merged(group: list[Segment], items: Callable[[Segment], list[str]]) -> list[str]:
    """Return one list of the group's items, deduplicated (the oldest segment is often an earlier merge)."""
    return dedupe_keep_latest([item for segment in group for item in items(segment)], head=len(items(group[0])))


def resolve_decisions(decisions: list[Decision], *, head: int = 0) -> tuple[list[Decision], list[str]]:
    """Return (kept, superseded): a decision is dropped when a later one sets the same topic or repeats it.

    A repeated decision hands its reason to the later wording when that one states none. When the first `head`
    decisions are a list this function kept before (none of them replaces another), only the later decisions
    are searched for their replacements: a merge then costs its new decisions, not the whole conversation's.
    """
    replaced_by = first_replacers(decisions, head=head)
    kept: list[Decision] = []
    superseded: list[str] = []
    reasons: dict[int, str] = {}
    for index, decision in enumerate(decisions):
        later = replaced_by[index]
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


def first_replacers(decisions: list[Decision], *, head: int = 0) -> list[int | None]:
    """Return, for each decision, the index of the first later one that replaces it (`_replaces`), or None.

    Decisions are indexed once by topic key and by numbers (a same-topic or near-duplicate pair shares one of
    them), so each decision costs a few lookups instead of a scan of every later one. Decisions before `head`
    are taken to have no replacement among themselves (see resolve_decisions).
    """
    texts = [decision.decision for decision in decisions]
    start = min(max(head, 0), len(texts))
    topics = TopicIndex([(index, topic_key(texts[index])) for index in range(start, len(texts))])
    near = NearIndex([(index, texts[index]) for index in range(start, len(texts))])
    result: list[int | None] = []
    for index, text in enumerate(texts):
        lowest = max(index + 1, start)
        best = topics.first_after(topic_key(text), lowest)
        # A near-duplicate counts only before the first same-topic one (it is the first replacement either way).
        earlier = near.first_after(text, lowest, best) if best != lowest else None
        result.append(earlier if earlier is not None else best)
    return result
