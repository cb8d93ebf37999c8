"""Candidate items of each layer: memories, knowledge, segments and recent turns.

The lines themselves are rendered where each kind lives: a memory's in acn/memory/lines.py, a segment's in
acn/compaction/segment_lines.py.
"""

from __future__ import annotations

import operator

from acn.assembly.fit import Item
from acn.assembly.recall import message_order
from acn.common.conversation import group_turns
from acn.common.models import Memory, Message, Segment
from acn.common.row_memo import remembered
from acn.compaction.segment_lines import brief_segment
from acn.memory.lines import KNOWLEDGE_TAG, UNDATED_TAG, memory_line_parts
from acn.text.similarity import normalise, shingles
from acn.text.tokens import Tokenizer


def memory_items(memories: list[Memory], language: str, tokenizer: Tokenizer, *,
                 shown: list[Memory] | None = None) -> list[Item]:
    """Return one tagged line per memory, in the given (ranked) order; repeated texts appear once.

    Dated archived messages carry their tag as a group header: a run of messages from the same day is shown
    under one `[from memory · date]` line, and the tokens a repeated tag would cost hold more evidence. Only the
    layer's first header says "from memory"; the days after it are headed by their date alone (short_header).
    With `shown` (memories whose items were made already, ranked before these), a text they hold is not repeated
    and ranks continue after theirs: the items of these memories alone, as memory_items(shown + memories) makes
    them, without rendering the shown ones again.
    """
    items: list[Item] = []
    seen = {memory_line_parts(memory, language, tokenizer).folded for memory in shown or []}
    for rank, memory in enumerate(memories, start=len(shown or [])):
        parts = memory_line_parts(memory, language, tokenizer)
        if parts.folded in seen:
            continue
        seen.add(parts.folded)
        source = {"id": memory.id, "kind": memory.kind, "layer": "memory", "turn_range": memory.turn_range,
                  "meta": memory.meta}
        # Facts first in rank order, then archived messages in conversation order (easier to follow).
        order = (1, *message_order(memory)) if memory.kind == "turn" else (0, rank, 0, 0)
        items.append(Item(key=memory.id, variants=[parts.line], order=order, source=source, group=parts.header,
                          short_group=parts.short_header, text=memory.content, costs=[parts.cost]))
    return items


def note_items(lines: list[str], language: str, *, kind: str) -> list[Item]:
    """Return caller-supplied lines (explicit memories or knowledge), tagged."""
    tag = KNOWLEDGE_TAG[language] if kind == "knowledge" else UNDATED_TAG["zh" if language == "zh" else "en"]
    return [Item(key=f"{kind}-{i}", variants=[f"{tag} {line.strip()}"], order=(1 if kind == "knowledge" else 0, i),
                 source={"id": f"{kind}-{i}", "kind": kind, "layer": "memory", "turn_range": None, "meta": {}})
            for i, line in enumerate(lines) if line.strip()]


def relevance(query: str, text: str, folded: str | None = None) -> float:
    """Return the share of the query's character bigrams found in text (0 when the query is empty).

    A bigram of the query is one of the text's when it occurs in the folded text (`folded`, normalise(text), when
    the caller kept it): looked up there, not in the text's bigram set. A segment's text is most of the working
    state (~3,000 tokens) and changes every turn, so its set was built anew on every assemble (issue 47: ~3,300
    bigrams a call, interned one by one).
    """
    wanted = shingles(query)
    if not wanted:
        return 0.0
    if folded is None:
        folded = normalise(text)
    if len(folded) < 2:
        return len(wanted & shingles(text)) / len(wanted)
    return sum(1 for bigram in wanted if len(bigram) == 2 and bigram in folded) / len(wanted)


def segment_items(segments: list[Segment], query: str, language: str, tokenizer: Tokenizer, *,
                  brief_only: bool) -> list[Item]:
    """Return segments newest first, then by relevance to the query; each full, then brief."""
    scored = [(relevance(query, s.text, segment_folded(s)), index, s) for index, s in enumerate(segments)]
    newest = len(segments) - 1
    scored.sort(key=lambda t: (t[1] != newest, -t[0], -t[1]))
    items: list[Item] = []
    for _, index, segment in scored:
        variants, costs = segment_variants(segment, language, tokenizer, brief_only=brief_only)
        source = {"id": segment.id, "kind": "segment", "layer": "working", "turn_range": segment.turn_range,
                  "meta": {}}
        # The first segment shown (the newest) is cut to the layer's room rather than dropped whole when even its
        # brief is too long: its head (goal, constraints, decisions) is the working state the next turn needs.
        items.append(Item(key=segment.id, variants=list(variants), order=(index,), source=source, cut=not items,
                          costs=list(costs)))
    return items


def segment_variants(segment: Segment, language: str, tokenizer: Tokenizer, *,
                     brief_only: bool) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """Return a segment's lines, richest first (its text, then its brief), and what each costs as a line.

    Kept with the segment object while the fields they are made of stay (the views current_segments serves are the
    same objects turn after turn): counted on every assemble instead, the ~3,700-character summary of a long
    session was ~1 ms of each call (issue 47)."""
    key = (segment.text, segment.goal, segment.constraints, segment.decisions, segment.facts, segment.key_numbers)

    def made() -> tuple[tuple[str, ...], tuple[int, ...]]:
        brief = brief_segment(segment, language)
        variants = tuple(dict.fromkeys([brief] if brief_only else [segment.text or brief, brief]))
        return variants, tuple(tokenizer.count(variant) + 1 for variant in variants)

    return remembered(segment, f"variants:{language}:{tokenizer.name}:{brief_only}", key, operator.eq, made)


def segment_folded(segment: Segment) -> str:
    """Return the segment's text folded (normalise), kept with the segment object while its text stays the same.

    The views current_segments serves are the same objects turn after turn; folded through the text cache instead,
    a long session's ~3,700-character summary was folded again whenever 32 chats had pushed it out (issue 47)."""
    text = segment.text
    return remembered(segment, "folded", text, operator.is_, lambda: normalise(text))


def turn_items(messages: list[Message]) -> list[Item]:
    """Return whole turns, newest first (priority); tool calls and their results stay together."""
    turns = group_turns([m for m in messages if m.role != "system"])
    items = []
    for turn in reversed(turns):
        metas = [m.meta for m in turn.messages if m.meta]
        source = {"id": f"turn-{turn.number}", "kind": "turn", "layer": "history",
                  "turn_range": [turn.number, turn.number], "meta": turn_meta(metas)}
        items.append(Item(key=f"turn-{turn.number}", variants=[], order=(turn.number,), source=source,
                          messages=turn.messages))
    return items


def turn_meta(metas: list[dict[str, object]]) -> dict[str, object]:
    """Return a turn's provenance: its one message meta, or every message's when several carry one."""
    if not metas:
        return {}
    return metas[0] if len(metas) == 1 else {"messages": metas}
