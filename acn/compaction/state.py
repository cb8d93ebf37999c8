"""The working state carried from segment to segment: the latest goal and the constraints in force."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from acn.common.models import Segment
from acn.compaction.statements import coverage, dedupe_keep_latest, is_near_duplicate, numbers_of, same_topic
from acn.text.similarity import similarity

# Words that announce the user is changing or dropping something said before.
_CHANGE_MARKERS = re.compile(
    r"(不再|不用再|取消|算了|作废|换个|改成|改为|改一下|换成|重新|现在可以|可以.{0,12}了|不做了|不需要了|别管|"
    r"\bno longer\b|\binstead\b|\bcancel|\bforget (?:about )?|\bnever mind\b|\byou can now\b|\bfeel free\b|"
    r"\bnew goal\b|\bchange of plan|\bdrop the\b|\bscratch that\b)",
    re.IGNORECASE,
)
_POLARITY = re.compile(
    r"(不要|不能|不可以|不许|禁止|别|务必|必须|一定|只能|只|可以|不再|不用再|取消|现在|了|"
    r"\bdon'?t\b|\bdo not\b|\bnever\b|\bmust\b|\bonly\b|\bno longer\b|\byou can now\b|\bplease\b|"
    r"\bnot\b|\bno\b)",
    re.IGNORECASE,
)
# Pronouns and politeness that an LLM freely drops or adds when it restates a constraint.
_FILLER = re.compile(
    r"(给我|给您|为我|为您|帮我|用户|请|我|你|您|\b(?:the|a|an|please|me|my|user)\b)", re.IGNORECASE
)
SUPERSEDE_SIMILARITY = 0.5
# An LLM rewords; a restatement only has to keep most of the old wording's character pairs.
RESTATE_COVERAGE = 0.5


@dataclass
class WorkingState:
    """What must survive compaction: the goal and the constraints in force."""

    goal: str = ""
    constraints: list[str] = field(default_factory=list)


def working_state(segments: list[Segment]) -> WorkingState:
    """Return the latest non-empty goal and the constraints of the latest segment.

    Each segment carries the constraints still in force, so the latest one is complete; taking a
    union instead would bring back constraints the user revoked since.
    """
    goal = next((segment.goal for segment in reversed(segments) if segment.goal), "")
    constraints = segments[-1].constraints if segments else []
    return WorkingState(goal=goal, constraints=dedupe_keep_latest(list(constraints), head=len(constraints)))


def has_change_marker(sentence: str) -> bool:
    """Return True when a sentence announces a change ("改成", "取消", "no longer", "instead" …)."""
    return _CHANGE_MARKERS.search(sentence) is not None


def supersedes(sentence: str, item: str) -> bool:
    """Return True when a user sentence explicitly changes or revokes an earlier goal or constraint."""
    if not has_change_marker(sentence):
        return False
    if same_topic(sentence, item):
        return True
    # Compare without the polarity words, so "不要推荐新品" and "现在可以推荐新品了" line up.
    return similarity(_POLARITY.sub("", sentence), _POLARITY.sub("", item)) >= SUPERSEDE_SIMILARITY


def carry_constraints(previous: list[str], new: list[str], user_sentences: list[str]) -> list[str]:
    """Return the previous constraints still in force followed by the new ones, near-duplicates merged."""
    # Only a sentence with a change marker can supersede: find those once, not once per constraint.
    changing = [sentence for sentence in user_sentences if has_change_marker(sentence)]
    kept = [
        item
        for item in previous
        if not any(supersedes(sentence, item) for sentence in changing)
        and not any(changes_value(fresh, item) for fresh in new)
    ]
    return dedupe_keep_latest(kept + new, head=len(kept))  # kept: what a dedupe returned, unless filtered


def changes_value(fresh: str, old: str) -> bool:
    """Return True when a new constraint sets another value for the same parameter ("不超过60秒")."""
    old_numbers, new_numbers = numbers_of(old), numbers_of(fresh)
    return bool(old_numbers and new_numbers) and old_numbers != new_numbers and same_topic(fresh, old)


def restates(old: str, new: str) -> bool:
    """Return True when new says what old said, give or take wording (paraphrases of an LLM included)."""
    if not old:
        return True
    if not new:
        return False
    if is_near_duplicate(old, new):
        return True
    return coverage(_FILLER.sub("", old), _FILLER.sub("", new)) >= RESTATE_COVERAGE
