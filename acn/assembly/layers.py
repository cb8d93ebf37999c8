"""Candidate items of each layer: memories, knowledge, segments and recent turns."""

from __future__ import annotations

import operator

from acn.assembly.fit import Item
from acn.assembly.recall import message_order
from acn.common.conversation import group_turns
from acn.common.models import Memory, Message, Segment
from acn.common.row_memo import remembered
from acn.compaction.segment_lines import LABELS, render_decision, render_header
from acn.retrieval.memory_lines import render_memories, source_tag, speaker_label
from acn.text.dates import normalise_date
from acn.text.similarity import normalise, shingles

KNOWLEDGE_TAG = {"zh": "[知识]", "en": "[knowledge]"}
UNDATED_TAG = {"zh": "[来自记忆]", "en": "[from memory]"}


def memory_items(memories: list[Memory], language: str) -> list[Item]:
    """Return one tagged line per memory, in the given (ranked) order; repeated texts appear once.

    Dated archived messages carry their tag as a group header: a run of messages from the same day is shown
    under one `[from memory · date]` line, and the tokens a repeated tag would cost hold more evidence. Only the
    layer's first header says "from memory"; the days after it are headed by their date alone (short_header).
    """
    items, seen = [], set()
    for rank, memory in enumerate(memories):
        text = normalise(memory.content)
        if text in seen:
            continue
        seen.add(text)
        source = {"id": memory.id, "kind": memory.kind, "layer": "memory", "turn_range": memory.turn_range,
                  "meta": memory.meta}
        # Facts first in rank order, then archived messages in conversation order (easier to follow).
        order = (1, *message_order(memory)) if memory.kind == "turn" else (0, rank, 0, 0)
        line, header = memory_line(memory, language)
        items.append(Item(key=memory.id, variants=[line], order=order, source=source, group=header,
                          short_group=short_header(header, language), text=memory.content))
    return items


def memory_line(memory: Memory, language: str) -> tuple[str, str]:
    """Return a memory's line and its group header ("" when the line carries its own tag).

    Every call renders its whole candidate pool (about 200 memories at 4,000 tokens) and a session's calls share
    most of it, so a line is kept with the memory object it was made of (acn/common/row_memo.py), with exactly
    what it was made of (source_tag and speaker_label read no other field): another session's rows never push it
    out, and a changed field makes it again.
    """
    meta = memory.meta
    key = (memory.kind, memory.content, memory.turn_range, bool(memory.valid_to), memory.scope, memory.created_at,
           meta.get("time"), meta.get("date"), meta.get("name"), meta.get("role"))
    return remembered(memory, f"line:{language}", key, operator.eq, lambda: _render_line(memory, language))


def _render_line(memory: Memory, language: str) -> tuple[str, str]:
    header = dated_header(memory, language)
    line = f"{speaker_label(memory, language)}: {memory.content}" if header else render_memories([memory], language)
    return line, header


def dated_header(memory: Memory, language: str) -> str:
    """Return the shared header of an archived message that has a date and a speaker, else ""."""
    when = memory.meta.get("time") or memory.meta.get("date")
    if memory.kind != "turn" or not (isinstance(when, str) and when.strip()) or not speaker_label(memory, language):
        return ""
    if when.strip() in memory.content or normalise_date(when) in memory.content:
        # The message states its date itself (a diary line, a memory bank entry): a dated header per message
        # would only repeat it, ~12 tokens a line, so such messages share one undated header.
        return UNDATED_TAG["zh" if language == "zh" else "en"]
    return source_tag(memory, language)


def short_header(header: str, language: str) -> str:
    """Return a dated group header without its "from memory" words (`[来自记忆 · 2024-08-31]` -> `[2024-08-31]`),
    or "" when it has nothing else to say.

    The day headers of a context's memory layer are most of its tags: on zh-daily at 1,000 tokens ~17 of them at
    15 tokens each (`[2024-08-31]` is 8), the room of five more messages. The layer's first header keeps the
    words, and sources[] keeps each line's id, kind, turns and meta. The fit writes a short header without the
    year the header before it said (`[08-31]`, 5 tokens; acn/assembly/fit.py header_line).
    """
    prefix = UNDATED_TAG["zh" if language == "zh" else "en"][:-1] + " · "
    return "[" + header[len(prefix):] if header.startswith(prefix) else ""


def note_items(lines: list[str], language: str, *, kind: str) -> list[Item]:
    """Return caller-supplied lines (explicit memories or knowledge), tagged."""
    tag = KNOWLEDGE_TAG[language] if kind == "knowledge" else ("[来自记忆]" if language == "zh" else "[from memory]")
    return [Item(key=f"{kind}-{i}", variants=[f"{tag} {line.strip()}"], order=(1 if kind == "knowledge" else 0, i),
                 source={"id": f"{kind}-{i}", "kind": kind, "layer": "memory", "turn_range": None, "meta": {}})
            for i, line in enumerate(lines) if line.strip()]


def brief_segment(segment: Segment, language: str) -> str:
    """Return a segment's skeleton (the rolling summary): no done/todo lists, everything else kept."""
    lang = "zh" if language == "zh" else "en"
    labels, separator = LABELS[lang], "；" if lang == "zh" else "; "
    parts = []
    if segment.goal:
        parts.append(f"{labels['goal']}: {segment.goal}")
    if segment.constraints:
        parts.append(f"{labels['constraints']}: {separator.join(segment.constraints)}")
    if segment.decisions:
        parts.append(f"{labels['decisions']}: {separator.join(render_decision(d, lang) for d in segment.decisions)}")
    if segment.facts:
        parts.append(f"{labels['facts']}: {separator.join(segment.facts)}")
    if segment.key_numbers:
        numbers = ", ".join(f"{k}={v}" for k, v in segment.key_numbers.items())
        parts.append(f"{labels['key_numbers']}: {numbers}")
    return f"{render_header(segment.turn_range, lang)} " + " | ".join(parts)


def relevance(query: str, text: str) -> float:
    """Return the share of the query's character bigrams found in text (0 when the query is empty).

    A bigram of the query is one of the text's when it occurs in the folded text: looked up there, not in the
    text's bigram set. A segment's text is most of the working state (~3,000 tokens) and changes every turn, so its
    set was built anew on every assemble (issue 47: ~3,300 bigrams a call, interned one by one).
    """
    wanted = shingles(query)
    if not wanted:
        return 0.0
    folded = normalise(text)
    if len(folded) < 2:
        return len(wanted & shingles(text)) / len(wanted)
    return sum(1 for bigram in wanted if len(bigram) == 2 and bigram in folded) / len(wanted)


def segment_items(segments: list[Segment], query: str, language: str, *, brief_only: bool) -> list[Item]:
    """Return segments newest first, then by relevance to the query; each full, then brief."""
    scored = [(relevance(query, s.text), index, s) for index, s in enumerate(segments)]
    newest = len(segments) - 1
    scored.sort(key=lambda t: (t[1] != newest, -t[0], -t[1]))
    items: list[Item] = []
    for _, index, segment in scored:
        brief = brief_segment(segment, language)
        variants = [brief] if brief_only else [segment.text or brief, brief]
        source = {"id": segment.id, "kind": "segment", "layer": "working", "turn_range": segment.turn_range,
                  "meta": {}}
        # The first segment shown (the newest) is cut to the layer's room rather than dropped whole when even its
        # brief is too long: its head (goal, constraints, decisions) is the working state the next turn needs.
        items.append(Item(key=segment.id, variants=list(dict.fromkeys(variants)), order=(index,), source=source,
                          cut=not items))
    return items


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
