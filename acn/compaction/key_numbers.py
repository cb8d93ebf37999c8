"""Label bookkeeping for key_numbers maps: unique labels, unions, and marking superseded values."""

from __future__ import annotations

import re
from bisect import bisect_right

from acn.compaction.statements import topic_key
from acn.text.numbers import KINDS, SEPARATOR, value_haystack, value_needle, value_present

EARLIER_SUFFIX = {"zh": "（此前）", "en": " (earlier)"}
_NUMBER_SUFFIX = re.compile(r"\s\d+$")


def unique_label(numbers: dict[str, str], label: str) -> str:
    """Return label, or its base + " 2", " 3" … whichever is not yet taken."""
    wanted = label.strip() or "number"
    if wanted not in numbers:
        return wanted
    base = _NUMBER_SUFFIX.sub("", wanted)
    suffix = 2
    while f"{base} {suffix}" in numbers:
        suffix += 1
    return f"{base} {suffix}"


def add_key_number(numbers: dict[str, str], label: str, value: str) -> str | None:
    """Add value under a unique label unless the value is already there; return the label used."""
    if value in numbers.values():
        return None
    unique = unique_label(numbers, label)
    numbers[unique] = value
    return unique


def union_pairs(mappings: list[dict[str, str]]) -> list[tuple[str, str]]:
    """Return the (label, value) pairs of several maps: each value once, collision suffixes (" 2") dropped."""
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for mapping in mappings:
        for label, value in mapping.items():
            if value not in seen:
                seen.add(value)
                pairs.append((_NUMBER_SUFFIX.sub("", label) or label, value))
    return pairs


def mark_earlier(
    pairs: list[tuple[str, str]], superseded: list[str], current: list[str], language: str
) -> list[tuple[str, str]]:
    """Relabel values that only superseded statements mention as earlier ones ("超时（此前）").

    A generic label (the value's kind, e.g. "duration") is replaced by the statement's topic.
    """
    suffix = EARLIER_SUFFIX["zh" if language == "zh" else "en"]
    find = _FirstMention(superseded)
    result: list[tuple[str, str]] = []
    for label, value in pairs:
        old_text = find.first(value)
        if (
            old_text
            and not label.endswith(suffix)
            and not any(value_present(value, text) for text in current)
        ):
            base = _NUMBER_SUFFIX.sub("", label)
            # A kind name ("duration") says little; the superseded statement's topic says what it was.
            label = ((topic_key(old_text) or base) if base in KINDS else base) + suffix
        result.append((label, value))
    return result


class _FirstMention:
    """Finds the first of some texts that states a value (value_present) without trying each text in turn.

    A merge carries every number of the conversation, and one long turn can supersede a thousand statements: the
    texts are searched at once (joined, without whitespace as value_present reads them), and only a text the
    value's characters occur in is tested exactly.
    """

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts
        self.joined = SEPARATOR.join(value_haystack(text) for text in texts)
        self.starts: list[int] = []
        offset = 0
        for text in texts:
            self.starts.append(offset)
            offset += len(value_haystack(text)) + 1

    def first(self, value: str) -> str | None:
        if not self.texts:
            return None
        at = self.joined.find(value_needle(value))
        while at >= 0:
            index = bisect_right(self.starts, at) - 1
            if value_present(value, self.texts[index]):
                return self.texts[index]
            at = self.joined.find(value_needle(value), self.starts[index + 1]) if index + 1 < len(self.texts) else -1
        return None


def build_key_numbers(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """Return {label: value} from pairs, values deduplicated, current labels before earlier ones."""
    ordered = sorted(pairs, key=lambda pair: pair[0].endswith(tuple(EARLIER_SUFFIX.values())))
    # What add_key_number does, with the values in a set and each label base's next free suffix remembered
    # (labels are only ever added, so it only grows): a merge's map holds every number of the conversation.
    numbers: dict[str, str] = {}
    values: set[str] = set()
    free: dict[str, int] = {}
    for label, value in ordered:
        if value in values:
            continue
        values.add(value)
        numbers[_free_label(numbers, label, free)] = value
    first: dict[str, int] = {}
    for index, (_, value) in enumerate(pairs):
        first.setdefault(value, index)
    # Keep the conversation's order in the result; only the label assignment used the priority.
    return {label: numbers[label] for label in sorted(numbers, key=lambda name: first[numbers[name]])}


def _free_label(numbers: dict[str, str], label: str, free: dict[str, int]) -> str:
    """Return unique_label(numbers, label), starting the suffix search where the last one for its base ended."""
    wanted = label.strip() or "number"
    if wanted not in numbers:
        return wanted
    base = _NUMBER_SUFFIX.sub("", wanted)
    suffix = free.get(base, 2)
    while f"{base} {suffix}" in numbers:
        suffix += 1
    free[base] = suffix + 1
    return f"{base} {suffix}"
