"""Render a segment as one compact line in the conversation's language, and count its tokens."""

from __future__ import annotations

from acn.common.models import Decision, Segment
from acn.compaction.state import WorkingState
from acn.text.numbers import value_present
from acn.text.tokens import Tokenizer

LABELS = {
    "zh": {
        "goal": "目标",
        "constraints": "约束",
        "done": "已完成",
        "todo": "待办",
        "decisions": "决策",
        "facts": "事实",
        "key_numbers": "关键数字",
        "reason": "（理由: {}）",
    },
    "en": {
        "goal": "Goal",
        "constraints": "Constraints",
        "done": "Done",
        "todo": "To do",
        "decisions": "Decisions",
        "facts": "Facts",
        "key_numbers": "Key numbers",
        "reason": " (reason: {})",
    },
}
ITEM_SEPARATOR = {"zh": "；", "en": "; "}
FIELD_SEPARATOR = " | "


def render_header(turn_range: list[int], language: str) -> str:
    """Return "[摘要 第1-6轮]" or "[Summary turns 1-6]"."""
    first, last = (turn_range + [0, 0])[:2]
    if language == "zh":
        return f"[摘要 第{first}轮]" if first == last else f"[摘要 第{first}-{last}轮]"
    return f"[Summary turn {first}]" if first == last else f"[Summary turns {first}-{last}]"


def render_decision(decision: Decision, language: str) -> str:
    """Return a decision with its reason, when one was stated."""
    if not decision.reason:
        return decision.decision
    return decision.decision + LABELS[_lang(language)]["reason"].format(decision.reason)


def render_segment(segment: Segment, language: str, inherited: WorkingState | None = None) -> str:
    """Return the segment as one line: header, then the non-empty fields separated by " | ".

    The goal and constraints carried unchanged from inherited (the earlier segments' state) are left
    out, and so are key numbers already quoted in the statements: the working summary shows each once.
    """
    lang = _lang(language)
    labels, items = LABELS[lang], ITEM_SEPARATOR[lang]
    carried = inherited or WorkingState()
    carried_constraints = set(carried.constraints)
    body = segment_body(segment)
    fields: list[tuple[str, list[str]]] = [
        ("goal", [segment.goal] if segment.goal and segment.goal != carried.goal else []),
        ("constraints", [item for item in segment.constraints if item not in carried_constraints]),
        ("done", segment.done),
        ("todo", segment.todo),
        ("decisions", [render_decision(decision, lang) for decision in segment.decisions]),
        ("facts", segment.facts),
        (
            "key_numbers",
            [
                f"{label}={value}"
                for label, value in segment.key_numbers.items()
                if not value_present(value, body)
            ],
        ),
    ]
    parts = [
        f"{labels[name]}: {(', ' if name == 'key_numbers' else items).join(values)}"
        for name, values in fields
        if values
    ]
    return " ".join([render_header(segment.turn_range, lang), FIELD_SEPARATOR.join(parts)]).strip()


def segment_body(segment: Segment) -> str:
    """Return every statement of the segment (not its key_numbers) as plain text, one per line."""
    decisions = [f"{item.decision} {item.reason or ''}".strip() for item in segment.decisions]
    lines = [segment.goal, *segment.constraints, *segment.done, *segment.todo, *decisions, *segment.facts]
    return "\n".join(line for line in lines if line)


def finish_segment(
    segment: Segment, language: str, tokenizer: Tokenizer, inherited: WorkingState | None = None
) -> Segment:
    """Return the segment with its text rendered and its tokens counted."""
    text = render_segment(segment, language, inherited)
    return segment.model_copy(update={"text": text, "tokens": tokenizer.count(text)})


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


def render_working_summary(segments: list[Segment]) -> str:
    """Return the segments' texts, oldest first, one per line."""
    return "\n".join(segment.text for segment in segments if segment.text)


def _lang(language: str) -> str:
    return "zh" if language == "zh" else "en"
