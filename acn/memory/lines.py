"""Memories as lines a model reads: source tags (kind, turns, date), speaker labels, one line per memory.

The one place a memory becomes text: memory_retrieve's `text`, the assemble memory layer (its lines and day
headers; acn/assembly/layers.py makes them into items), Dify's external memory and the inspector's labels.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NamedTuple

from acn.common.models import Memory
from acn.common.row_memo import remembered
from acn.text.dates import normalise_date
from acn.text.similarity import normalise
from acn.text.tokens import Tokenizer

KIND_LABELS_ZH = {
    "identity": "身份", "preference": "偏好", "constraint": "约束", "decision": "决策", "fact": "事实",
    "todo": "待办", "artifact": "产出", "knowledge": "知识", "summary": "摘要", "turn": "原话",
}
ROLE_LABELS_ZH = {"user": "用户", "assistant": "助手", "tool": "工具"}
KNOWLEDGE_TAG = {"zh": "[知识]", "en": "[knowledge]"}
UNDATED_TAG = {"zh": "[来自记忆]", "en": "[from memory]"}


def source_tag(memory: Memory, language: str) -> str:
    """Return the tag that tells the model a line comes from memory: kind, turns and, when known, time."""
    parts = ["来自记忆" if language == "zh" else "from memory"]
    if memory.kind != "turn":  # an archived message says who spoke instead (see render_memory)
        parts.append(KIND_LABELS_ZH.get(memory.kind, memory.kind) if language == "zh" else memory.kind)
    when = memory.meta.get("time") or memory.meta.get("date")
    dated = isinstance(when, str) and bool(when.strip())
    # For an archived message a date tells a model more than a turn number (which stays in `sources`). A user's
    # memory comes from one of their conversations, maybe an earlier one: its turn number would point into the wrong
    # conversation, so the day it was said is given instead.
    if memory.turn_range and memory.scope != "user" and not (dated and memory.kind == "turn"):
        parts.append(turns_label(memory.turn_range, language))
    if dated:
        parts.append(normalise_date(str(when)))
    elif memory.scope == "user":
        parts.append(utc_day(memory.created_at))
    if memory.valid_to:
        parts.append("已被取代" if language == "zh" else "superseded")
    return "[" + " · ".join(parts) + "]"


def utc_day(epoch_ms: int) -> str:
    """Return the UTC day of a stamp (2026-12-05); a stamp no calendar holds as its number."""
    try:
        return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC).strftime("%Y-%m-%d")
    except (OverflowError, OSError, ValueError):
        return str(epoch_ms)


def speaker_label(memory: Memory, language: str) -> str:
    """Return who said an archived message (its name, else its role), or "" for other memories."""
    if memory.kind != "turn":
        return ""
    name = memory.meta.get("name")
    if isinstance(name, str) and name:
        return name
    role = str(memory.meta.get("role") or "")
    return ROLE_LABELS_ZH.get(role, role) if language == "zh" else role


def turns_label(turn_range: list[int], language: str) -> str:
    """Return 第3-8轮 / turns 3-8 (a single turn as 第3轮 / turn 3)."""
    first, last = turn_range[0], turn_range[-1]
    span = str(first) if first == last else f"{first}-{last}"
    if language == "zh":
        return f"第{span}轮"
    return f"turn {span}" if first == last else f"turns {span}"


def render_memories(memories: Sequence[Memory], language: str) -> str:
    """Return one tagged line per memory; an archived message names its speaker."""
    return "\n".join(render_memory(m, language) for m in memories)


def render_memory(memory: Memory, language: str) -> str:
    """Return one memory as a tagged line: `[tag] content`, or `[tag] speaker: content` for a message."""
    speaker = speaker_label(memory, language)
    return f"{source_tag(memory, language)} {speaker + ': ' if speaker else ''}{memory.content}"


class LineParts(NamedTuple):
    """What the memory layer makes of a memory: its line, its group header in full and short (short_header), what
    the line costs in a layer (its tokens and its newline, as acn/assembly/fit.py variant_costs counts it), and its
    folded content (text.similarity.normalise: the layer shows a text once)."""

    line: str
    header: str
    short_header: str
    cost: int
    folded: str


def memory_line(memory: Memory, language: str) -> tuple[str, str]:
    """Return a memory's line and its group header ("" when the line carries its own tag).

    Every call renders its whole candidate pool (about 200 memories at 4,000 tokens) and a session's calls share
    most of it, so a line is kept with the memory object it was made of (acn/common/row_memo.py), with exactly
    what it was made of (source_tag and speaker_label read no other field): another session's rows never push it
    out, and a changed field makes it again.
    """
    return remembered(memory, f"line:{language}", _line_key(memory), operator.eq,
                      lambda: _render_line(memory, language))


def memory_line_parts(memory: Memory, language: str, tokenizer: Tokenizer) -> LineParts:
    """Return the memory's LineParts, kept with the memory object like its line (made of the same fields).

    One lookup for all of them: memory_items reads each of them for each of a call's ~120 candidates, and four
    lookups (the line, its count, the folded text, the short header made again) were ~3 us a candidate more (issue
    47). The count was a process-wide cache's before, and with 32 chats at once their lines pushed each other out
    of it (~100 of a call's ~110 lines counted again at turn 250)."""
    return remembered(memory, f"parts:{language}:{tokenizer.name}", _line_key(memory), operator.eq,
                      lambda: _line_parts(memory, language, tokenizer))


def memory_line_cost(memory: Memory, language: str, tokenizer: Tokenizer) -> int:
    """Return what a memory's line costs in a layer: its tokens and its newline (see LineParts)."""
    return memory_line_parts(memory, language, tokenizer).cost


def folded_content(memory: Memory) -> str:
    """Return the memory's content folded (normalise), kept with the memory object while its content stays.

    Assembly compares folded contents of the same candidates on every call (a fact against the message of its
    turn, the fill against what was served); through the text cache, 32 chats at once pushed each other's out of
    it and folded them again (issue 47)."""
    content = memory.content
    return remembered(memory, "folded", content, operator.is_, lambda: normalise(content))


def _line_key(memory: Memory) -> tuple[object, ...]:
    """Return every field a memory's line is made of (source_tag, speaker_label and the content read no other)."""
    meta = memory.meta
    return (memory.kind, memory.content, memory.turn_range, bool(memory.valid_to), memory.scope, memory.created_at,
            meta.get("time"), meta.get("date"), meta.get("name"), meta.get("role"))


def _line_parts(memory: Memory, language: str, tokenizer: Tokenizer) -> LineParts:
    line, header = memory_line(memory, language)
    return LineParts(line, header, short_header(header, language), tokenizer.count(line) + 1,
                     folded_content(memory))


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
