"""Memories as lines a model reads: source tags (kind, turns, date), speaker labels, one line per memory."""

from __future__ import annotations

from datetime import UTC, datetime

from acn.common.models import Memory
from acn.retrieval.rank import RetrievedMemory
from acn.text.dates import normalise_date

KIND_LABELS_ZH = {
    "identity": "身份", "preference": "偏好", "constraint": "约束", "decision": "决策", "fact": "事实",
    "todo": "待办", "artifact": "产出", "knowledge": "知识", "summary": "摘要", "turn": "原话",
}
ROLE_LABELS_ZH = {"user": "用户", "assistant": "助手", "tool": "工具"}


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


def render_memories(memories: list[RetrievedMemory] | list[Memory], language: str) -> str:
    """Return one tagged line per memory; an archived message names its speaker."""
    return "\n".join(render_memory(m, language) for m in memories)


def render_memory(memory: Memory, language: str) -> str:
    """Return one memory as a tagged line: `[tag] content`, or `[tag] speaker: content` for a message."""
    speaker = speaker_label(memory, language)
    return f"{source_tag(memory, language)} {speaker + ': ' if speaker else ''}{memory.content}"
