"""Checks applied to every new segment: no key number lost, and the working state carried over (what an LLM
segment may say at all: acn/compaction/grounding.py)."""

from __future__ import annotations

from dataclasses import dataclass

from acn.common.models import Segment
from acn.compaction.key_numbers import add_key_number
from acn.compaction.rules import changes_goal
from acn.compaction.segment_lines import segment_body
from acn.compaction.state import changes_value, restates, supersedes, working_state
from acn.text.numbers import KeyNumber, value_present


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
