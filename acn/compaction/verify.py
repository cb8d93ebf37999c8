"""Checks applied to every new segment: no key number lost, and the working state carried over."""

from __future__ import annotations

import re
from dataclasses import dataclass

from acn.common.models import Segment
from acn.compaction.key_numbers import add_key_number
from acn.compaction.rules import changes_goal
from acn.compaction.segment_lines import segment_body
from acn.compaction.state import changes_value, restates, supersedes, working_state
from acn.text.numbers import KeyNumber, extract_key_numbers, value_present


@dataclass
class NumberCheck:
    """A segment after number verification, with what was found, kept and restored."""

    segment: Segment
    in_source: int
    preserved: int
    restored: int


def verify_numbers(segment: Segment, source: list[KeyNumber]) -> NumberCheck:
    """Restore into key_numbers every source number missing from the segment's statements and key_numbers."""
    # The statements, not the rendered text: a header "第1-6轮" must not vouch for a lost "6".
    haystack = "\n".join([segment_body(segment), *segment.key_numbers.values()])
    missing = [number for number in source if not value_present(number.value, haystack)]
    numbers = dict(segment.key_numbers)
    for number in missing:
        add_key_number(numbers, number.label, number.value)
    restored = segment.model_copy(update={"key_numbers": numbers})
    return NumberCheck(restored, len(source), len(source) - len(missing), len(missing))


def self_check(previous: list[Segment], new: list[Segment], user_sentences: list[str]) -> list[str]:
    """Return the problems of new segments: the previous goal or a constraint lost, not superseded."""
    state = working_state(previous)
    problems: list[str] = []
    new_goal = next((segment.goal for segment in reversed(new) if segment.goal), "")
    goal_changed = any(
        changes_goal(sentence) or supersedes(sentence, state.goal) for sentence in user_sentences
    )
    if state.goal and not goal_changed and not restates(state.goal, new_goal):
        problems.append(f"goal lost: {state.goal!r} became {new_goal!r}")
    new_constraints = [item for segment in new for item in segment.constraints]
    for constraint in state.constraints:
        if _constraint_kept(constraint, new_constraints, user_sentences):
            continue
        problems.append(f"constraint lost: {constraint!r}")
    return problems


def _constraint_kept(constraint: str, new_constraints: list[str], user_sentences: list[str]) -> bool:
    if any(restates(constraint, item) or changes_value(item, constraint) for item in new_constraints):
        return True
    return any(supersedes(sentence, constraint) for sentence in user_sentences)


# An LLM statement must be drawn from what it summarizes: at least this share of its words (each CJK character
# counts as a word) must occur in the conversation or the working state carried in. A paraphrase passes; text
# the "LLM" made up (an injected instruction, a link, an invented goal) does not.
GROUNDED_SHARE = 0.5
MAX_STATEMENT_CHARS = 500
MAX_ITEMS_PER_FIELD = 30
MAX_KEY_NUMBERS = 60
MAX_LABEL_CHARS = 60
_WORD = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")


def _words(text: str) -> list[str]:
    """Return the words of text, lower case; every CJK character is a word of its own."""
    words: list[str] = []
    for match in _WORD.finditer(text.lower()):
        word = match.group()
        if _CJK.search(word):
            words += [piece for piece in re.split(f"({_CJK.pattern})", word) if piece]
        else:
            words.append(word)
    return words


def grounding_problems(segment: Segment, source: str) -> list[str]:
    """Return what in an LLM segment is not backed by the source text (field names only, never the text).

    Checked: every statement (goal, constraints, done, todo, decisions with reasons, facts) is at most
    MAX_STATEMENT_CHARS long and GROUNDED_SHARE of its words occur in the source; every number in a statement
    and every key_numbers value occurs in the source (value_present); list sizes and key_numbers labels are
    bounded. Not checked: the labels' wording, and whether a grounded statement is a faithful summary.
    """
    known = set(_words(source))
    problems: list[str] = []
    fields: list[tuple[str, list[str]]] = [
        ("goal", [segment.goal] if segment.goal else []),
        ("constraints", segment.constraints), ("done", segment.done), ("todo", segment.todo),
        ("decisions", [f"{d.decision} {d.reason or ''}".strip() for d in segment.decisions]),
        ("facts", segment.facts),
    ]
    for name, items in fields:
        if len(items) > MAX_ITEMS_PER_FIELD:
            problems.append(f"{name}: more than {MAX_ITEMS_PER_FIELD} items")
        for item in items:
            words = _words(item)
            found = sum(word in known for word in words)
            if len(item) > MAX_STATEMENT_CHARS:
                problems.append(f"{name}: a statement longer than {MAX_STATEMENT_CHARS} characters")
            elif words and found < GROUNDED_SHARE * len(words):
                problems.append(f"{name}: a statement not found in the conversation")
            elif any(not value_present(number.value, source) for number in extract_key_numbers(item)):
                problems.append(f"{name}: a number not in the conversation")
    if len(segment.key_numbers) > MAX_KEY_NUMBERS:
        problems.append(f"key_numbers: more than {MAX_KEY_NUMBERS} entries")
    if any(len(label) > MAX_LABEL_CHARS for label in segment.key_numbers):
        problems.append(f"key_numbers: a label longer than {MAX_LABEL_CHARS} characters")
    if any(not value_present(value, source) for value in segment.key_numbers.values()):
        problems.append("key_numbers: a value not in the conversation")
    return list(dict.fromkeys(problems))
