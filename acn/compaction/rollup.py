"""Roll the oldest segment up into a bounded summary once the working state outgrows its token cap.

Merging keeps every statement of the merged segments (each holds a number the verifier vouched for), so without
a cap a number-rich chat's oldest segment grows by a line or two a turn: at turn 600 one segment held 593 `done`
and 1,100 `facts` lines, every assemble re-rendered it and every record_turn re-merged it (issue 47). A session's
raw turns are archived verbatim when they arrive, and the numbers the user states are extracted as memories, so
the working state need not be the only copy: past the cap the oldest segment keeps its goal and, newest first,
what fits of its constraints, decisions, to-dos, facts, key numbers and done lines. Only turns already archived
are rolled up (compact without a session or without persist keeps everything: there the segments are the only
copy). Every line of a rolled-up segment is one of its own: nothing is rewritten, so nothing new needs proving.
"""

from __future__ import annotations

from collections.abc import Callable

from acn.common.models import Decision, Segment
from acn.compaction.merge import merge_group
from acn.compaction.segment_lines import finish_segment
from acn.compaction.segments import segment_id
from acn.text.tokens import Tokenizer

# The working state's cap as a share of the compaction trigger (trigger_ratio × context_window): 3,200 tokens at
# the default 8,000-token window. At the trigger itself a long session keeps compacting on every turn, as it did
# when its summary was over it (only now at a bounded cost), so its verbatim buffer stays at keep_recent turns and
# every older turn is a recall candidate. Decided on the dev splits of bench.recall (issue 47): a cap of 0.6 × the
# trigger let the buffer grow to what the other 40 % held, and cost LoCoMo dev 84.9 / 90.5 / 94.0 ->
# 84.6 / 89.9 / 93.7 and MADial-zh dev 81.7 -> 80.5 at 1k; at 1.0 both are as they were (MADial-zh 4k +0.2);
# 1.5 was no better on dev (zh-daily 1k +0.3, 4k -0.2) for a working state half as large again.
SUMMARY_SHARE = 1.0
# What the oldest segment keeps however full the newer ones are: its goal and a few lines.
MIN_OLDEST_TOKENS = 120
# A trim leaves up to this share of the cap free, so the turns after it compact without trimming again. Trimmed to
# the cap itself, a long session's oldest segment was cut, rendered and counted on ~8 turns in 10 (each turn's
# segment is ~70 tokens, and five merge every fourth turn): 1.2 ms of a turn's 3.7 ms of compaction at turn 1,300
# (issue 47). The room left is at most what the verbatim turns kept hold, less TRIM_MARGIN (a line the trim may cut
# short): the compaction trigger counts them with the state, so the next turn still compacts. Room beyond that let
# turns wait in the buffer after a trim, which cost recall on the dev splits (MADial-zh 2k 92.7 -> 92.5, zh-daily 4k
# 99.7 -> 99.5).
TRIM_SLACK = 0.1
TRIM_MARGIN = 60
# A field's label and separator, and a line's separator, in tokens (the fit is then checked on the rendered text).
FIELD_OVERHEAD = 4
ITEM_OVERHEAD = 1
# Fields in the order they are kept: what is in force first, then what was stated, the record of what happened
# last (key numbers not quoted by a statement are mostly tool output's ids; done lines restate the requests).
ORDER = ("constraints", "decisions", "todo", "facts", "key_numbers", "done")


def summary_cap(trigger_tokens: float) -> int:
    """Return the working state's token cap for a compaction trigger."""
    return max(MIN_OLDEST_TOKENS * 2, int(trigger_tokens * SUMMARY_SHARE))


def roll_up(segments: list[Segment], cap: int, archived_turn: int, *, tokenizer: Tokenizer,
            language: str, verbatim: int = 0) -> list[Segment]:
    """Return segments whose tokens fit in cap, the oldest one trimmed if it covers only archived turns; a trim
    leaves room for the next turns (see TRIM_SLACK) out of `verbatim`, the tokens of the turns kept verbatim."""
    if not segments or sum(s.tokens for s in segments) <= cap:
        return segments
    oldest, newer = segments[0], segments[1:]
    if not oldest.turn_range or oldest.turn_range[-1] > archived_turn:
        return segments
    # Newer segments that alone leave the oldest less than its minimum join it (a merge, as merge_segments does),
    # so the cap holds whatever the segment size and count: only the newest segment is never merged here.
    while len(newer) > 1 and sum(s.tokens for s in newer) > cap - MIN_OLDEST_TOKENS \
            and newer[0].turn_range and newer[0].turn_range[-1] <= archived_turn:
        oldest = merge_group([oldest, newer[0]], tokenizer=tokenizer, language=language, resolved=True)
        newer = newer[1:]
    allowance = max(MIN_OLDEST_TOKENS, cap - sum(s.tokens for s in newer))
    if oldest.tokens <= allowance:
        return [oldest, *newer]
    room = max(MIN_OLDEST_TOKENS, allowance - min(int(cap * TRIM_SLACK), max(0, verbatim - TRIM_MARGIN)))
    return [trim_segment(oldest, room, tokenizer=tokenizer, language=language), *newer]


def trim_segment(segment: Segment, allowance: int, *, tokenizer: Tokenizer, language: str) -> Segment:
    """Return the segment with its oldest lines left out until its rendered text fits in allowance tokens."""
    budget, count = allowance, line_counter(tokenizer)
    for _attempt in range(4):
        trimmed = _finish(_kept_lines(segment, budget, count), language, tokenizer)
        if trimmed.tokens <= allowance:
            return trimmed
        over, budget = budget, budget - (trimmed.tokens - allowance)  # the estimate was short: ask for that less
    # The rendered cost is not monotonic in the budget: a fact left out leaves room for more key numbers, and those it
    # quoted are shown again (render_segment shows a number no statement holds), so the correction can overshoot
    # every time. It used to fall back to a budget of 0 (the goal alone: the whole state but its header lost, on 22
    # of 400 allowances tried below a 3,157-token segment of the long chat). A bisection finds a budget that fits.
    fits, best = 0, _finish(_kept_lines(segment, 0, count), language, tokenizer)
    while over - fits > 1:
        middle = (fits + over) // 2
        trimmed = _finish(_kept_lines(segment, middle, count), language, tokenizer)
        if trimmed.tokens <= allowance:
            fits, best = middle, trimmed
        else:
            over = middle
    return best


def line_counter(tokenizer: Tokenizer) -> Callable[[str], int]:
    """Return a count of tokens that counts each line once: a trim tries up to ~14 budgets over the same lines.

    The tokenizer's own cache is the whole process's: with 32 chats at once other sessions' lines had pushed these
    out by the next trim, and every try counted them again (~78 counts a turn at turn 250, issue 47)."""
    counts: dict[str, int] = {}

    def count(line: str) -> int:
        known = counts.get(line)
        if known is None:
            known = counts[line] = tokenizer.count(line)
        return known
    return count


def _kept_lines(segment: Segment, budget: int, count: Callable[[str], int]) -> Segment:
    """Return the segment keeping, field by field in ORDER, the newest lines whose estimated cost fits budget."""
    used = count(segment.goal) + 2 * FIELD_OVERHEAD  # the header and the goal
    update: dict[str, object] = {}
    for name in ORDER:
        lines = _lines(segment, name)
        kept: list[int] = []
        cost = FIELD_OVERHEAD
        for index in range(len(lines) - 1, -1, -1):
            line_cost = count(lines[index]) + ITEM_OVERHEAD
            if used + cost + line_cost > budget:
                break  # newest first: an older line never takes the place of a newer one
            cost += line_cost
            kept.append(index)
        if kept:
            used += cost
        update[name] = _select(segment, name, sorted(kept))
    return segment.model_copy(update=update)


def _lines(segment: Segment, name: str) -> list[str]:
    if name == "decisions":
        return [f"{d.decision} {d.reason or ''}".strip() for d in segment.decisions]
    if name == "key_numbers":
        return [f"{label}={value}" for label, value in segment.key_numbers.items()]
    values: list[str] = getattr(segment, name)
    return values


def _select(segment: Segment, name: str, indexes: list[int]) -> object:
    if name == "decisions":
        decisions: list[Decision] = [segment.decisions[i] for i in indexes]
        return decisions
    if name == "key_numbers":
        pairs = list(segment.key_numbers.items())
        return dict(pairs[i] for i in indexes)
    values: list[str] = getattr(segment, name)
    return [values[i] for i in indexes]


def _finish(segment: Segment, language: str, tokenizer: Tokenizer) -> Segment:
    return finish_segment(segment.model_copy(update={"id": segment_id(segment)}), language, tokenizer)
