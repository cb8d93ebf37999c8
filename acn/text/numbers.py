"""Find the numbers, dates, amounts, IDs and codes a summary must never lose."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass
from functools import lru_cache

from acn.text.number_patterns import FOLD, PATTERNS, char_mask, pattern_spans, runnable

KINDS = (
    "amount",
    "date",
    "time",
    "duration",
    "percent",
    "id",
    "account",
    "version",
    "phone",
    "email",
    "number",
)


@dataclass(frozen=True)
class KeyNumber:
    """One key value found in text: its kind, the verbatim value and a short label."""

    kind: str
    value: str
    label: str


# Label keywords: (label, pattern, where) — where is "before", "after" or "both" relative to the value.
_LABELS: list[tuple[str, re.Pattern[str], str]] = [
    ("订单号", re.compile(r"订单号?|单号"), "before"),
    ("order", re.compile(r"\border(?:\s?(?:id|no\.?|number))?\b", re.IGNORECASE), "before"),
    ("工单号", re.compile(r"工单号?"), "before"),
    ("ticket", re.compile(r"\bticket\b", re.IGNORECASE), "before"),
    ("卡号", re.compile(r"卡号|银行卡|信用卡"), "before"),
    ("card", re.compile(r"\bcard\b", re.IGNORECASE), "before"),
    ("账户", re.compile(r"账户|帐户"), "before"),
    ("账号", re.compile(r"账号|帐号"), "before"),
    ("account", re.compile(r"\baccount\b", re.IGNORECASE), "before"),
    ("手机号", re.compile(r"手机号?码?|电话号?码?|联系方式"), "before"),
    ("phone", re.compile(r"\b(?:phone|mobile|tel)\b", re.IGNORECASE), "before"),
    ("邮箱", re.compile(r"邮箱|邮件地址"), "before"),
    ("email", re.compile(r"\be-?mail\b", re.IGNORECASE), "before"),
    ("超时", re.compile(r"超时"), "both"),
    ("timeout", re.compile(r"\btime-?out\b", re.IGNORECASE), "both"),
    ("重试", re.compile(r"重试"), "before"),
    ("retries", re.compile(r"\bretr(?:y|ies)\b", re.IGNORECASE), "before"),
    ("阈值", re.compile(r"阈值"), "before"),
    ("threshold", re.compile(r"\bthreshold\b", re.IGNORECASE), "before"),
    ("预算", re.compile(r"预算"), "before"),
    ("budget", re.compile(r"\bbudget\b", re.IGNORECASE), "before"),
    ("价格", re.compile(r"价格|单价|售价|报价"), "before"),
    ("price", re.compile(r"\b(?:price|cost)\b", re.IGNORECASE), "before"),
    ("金额", re.compile(r"金额|余额|费用|总额"), "before"),
    ("折扣", re.compile(r"折扣|优惠"), "before"),
    ("版本", re.compile(r"版本"), "before"),
    ("version", re.compile(r"\bversion\b", re.IGNORECASE), "before"),
    ("截止日期", re.compile(r"截止|最晚|deadline|due", re.IGNORECASE), "before"),
    ("截止日期", re.compile(r"^\s?(?:之前|以前|前)"), "after"),
    ("deadline", re.compile(r"\b(?:by|before)\s?$", re.IGNORECASE), "before"),
    ("温度", re.compile(r"温度"), "before"),
    ("temperature", re.compile(r"\btemperature\b", re.IGNORECASE), "before"),
]
_ID_LABELS = {"订单号", "order", "工单号", "ticket"}
_CLAUSE_BREAK = re.compile(r"[，,。；;！!？?\n]")
_WINDOW = 16
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DIGITS = "0123456789"
_SPACES = re.compile(r"\s+")  # Unicode whitespace, including the ideographic space


def extract_key_numbers(text: str) -> list[KeyNumber]:
    """Return the key values of text in order of first appearance, deduplicated by value."""
    return list(_key_numbers(text))


def key_values(text: str) -> tuple[str, ...]:
    """Return the values of extract_key_numbers(text), in its order, without labelling them: labelling searches
    ~30 patterns around each value, about a third of the work, and write-time dedup asks only which values a
    text holds (memory.dedup_index.numbers_conflict)."""
    spans, kept = _value_spans(text)
    return tuple(text[spans[index][0]: spans[index][1]] for index in kept)


# Compaction reads the numbers of the same source several times (summary, verifier, stats), and dedup and
# assembly ask about the same stored lines on every request: results are remembered per text.
@lru_cache(maxsize=1024)
def _key_numbers(text: str) -> tuple[KeyNumber, ...]:
    spans, kept = _value_spans(text)
    found: list[KeyNumber] = []
    for index in kept:
        start, end, kind = spans[index]
        previous_end = spans[index - 1][1] if index else 0
        next_start = spans[index + 1][0] if index + 1 < len(spans) else len(text)
        label = _label(text, start, end, previous_end, next_start) or kind
        found.append(KeyNumber(kind=_refine_kind(kind, label), value=text[start:end], label=label))
    return tuple(found)


def _value_spans(text: str) -> tuple[list[tuple[int, int, str]], list[int]]:
    """Return the chosen spans of the text's values (start, end, kind), and the indices of those that count: the
    first span of each value, unless the value appears inside a longer one."""
    spans = _select_spans(_candidates(text.translate(FOLD)))
    covered = _covered([text[start:end] for start, end, _ in spans])
    seen: set[str] = set()
    kept: list[int] = []
    for index, (start, end, _) in enumerate(spans):
        value = text[start:end]
        if value not in seen and value not in covered:
            seen.add(value)
            kept.append(index)
    return spans, kept


def _covered(values: list[str]) -> set[str]:
    """Return the values that already appear inside a longer value ("2025" in "2025-03-17")."""
    canonical = {value: _canonical(value) for value in dict.fromkeys(values)}
    # One search of all values joined (NUL separated) finds the values a needle is in, instead of a pair loop:
    # a pasted document has thousands of numbers.
    entries = list(canonical.items())
    joined = SEPARATOR.join(haystack for _, haystack in entries)
    starts = []
    offset = 0
    for _, haystack in entries:
        starts.append(offset)
        offset += len(haystack) + 1
    covered = set()
    for value, needle in entries:
        at = joined.find(needle) if needle else -1
        while at >= 0:
            index = bisect_right(starts, at) - 1
            other = entries[index][0]
            if other != value and value_present(value, other):
                covered.add(value)
                break
            at = joined.find(needle, starts[index + 1]) if index + 1 < len(starts) else -1
        if needle == "" and len(entries) > 1:
            covered.add(value)  # "" is in every other value, as the pair loop found
    return covered


def _candidates(folded: str) -> list[tuple[int, int, int, str]]:
    """Return every pattern match as (start, end, priority, kind)."""
    found = []
    # Patterns missing a character they cannot match without are skipped (NEEDS): same result, fewer passes.
    for priority in runnable(char_mask(folded)):
        kind = PATTERNS[priority][0]
        for start, end in pattern_spans(priority, folded):
            start, end = _trim(folded, start, end)
            if end > start and _clean_edges(folded, start, end):
                found.append((start, end, priority, kind))
    return found


def _clean_edges(folded: str, start: int, end: int) -> bool:
    """Return False when a span starts or ends inside a longer number ("a-0" in "a-0.0")."""
    first, last = folded[start], folded[end - 1]
    before, after, after_next = folded[start - 1 : start], folded[end : end + 1], folded[end + 1 : end + 2]
    if first in _DIGITS and before and before in _DIGITS + ".":
        return False
    if (
        last in _DIGITS
        and after
        and (after in _DIGITS or (after == "." and after_next and after_next in _DIGITS))
    ):
        return False
    return True


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """Return the span without surrounding whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end


def _select_spans(candidates: list[tuple[int, int, int, str]]) -> list[tuple[int, int, str]]:
    """Keep the longest non-overlapping matches (earlier patterns win ties), in text order."""
    chosen: list[tuple[int, int, str]] = []
    # The chosen spans are disjoint: kept sorted by start, only the last one starting before `end` can overlap
    # a new span (a pasted document has thousands of candidates; testing each against all chosen was quadratic).
    starts: list[int] = []
    ends: list[int] = []
    for start, end, _, kind in sorted(candidates, key=lambda c: (c[0] - c[1], c[2], c[0])):
        at = bisect_left(starts, end)
        if at and ends[at - 1] > start:
            continue
        starts.insert(at, start)
        ends.insert(at, end)
        chosen.append((start, end, kind))
    return sorted(chosen)


def _label(text: str, start: int, end: int, previous_end: int, next_start: int) -> str | None:
    """Return the label named by the words around a value, or None."""
    before = _clause_tail(text[max(previous_end, start - _WINDOW) : start])
    after = _clause_head(text[end : min(next_start, end + _WINDOW)])
    best: tuple[int, str] | None = None
    for label, pattern, where in _LABELS:
        if where in ("before", "both"):
            for match in pattern.finditer(before):
                distance = len(before) - match.end()
                if best is None or distance < best[0]:
                    best = (distance, label)
        if where in ("after", "both") and best is None:
            found = pattern.search(after)
            if found and (where == "after" or found.start() <= 2):
                best = (_WINDOW + found.start(), label)
    if best is None:
        return _parameter_name(text, start)
    return best[1]


def _clause_tail(text: str) -> str:
    """Return the part of text after the last clause break."""
    parts = _CLAUSE_BREAK.split(text)
    return parts[-1]


def _clause_head(text: str) -> str:
    """Return the part of text before the first clause break."""
    return _CLAUSE_BREAK.split(text, maxsplit=1)[0]


_PARAMETER = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s?(?:=|:|：)\s?$")


def _parameter_name(text: str, start: int) -> str | None:
    """Return the name in "name=value" right before start, or None."""
    match = _PARAMETER.search(text[max(0, start - 40) : start])
    return match.group(1) if match else None


def _refine_kind(kind: str, label: str) -> str:
    """Return "id" for digit runs that the nearby words call an order or ticket number."""
    if kind in ("account", "number") and label in _ID_LABELS:
        return "id"
    return kind


def _canonical(text: str) -> str:
    """Fold width and drop thousands separators."""
    return _THOUSANDS.sub("", text.translate(FOLD).replace("￥", "¥"))


def value_present(value: str, text: str) -> bool:
    """Return True when value is in text, ignoring whitespace, full-width digits and thousands separators."""
    needle = value_needle(value)
    if not needle:
        return True
    canonical = _canonical_text(text)
    # Compiling the pattern costs ~0.5 ms a value and a compaction checks thousands: most values are written
    # without inner spaces (found by plain search, then the pattern's boundaries checked) or are absent (their
    # characters are not even in the text without spaces); only the rest needs the pattern.
    if _plain_match(needle, canonical):
        return True
    if needle not in _stripped_text(text):
        return False
    pattern = _value_pattern(value)
    return pattern is None or pattern.search(canonical) is not None


def _plain_match(needle: str, text: str) -> bool:
    """Return True when needle occurs in text as is, within _value_pattern's number boundaries."""
    left, right = needle[0].isdigit(), needle[-1].isdigit()
    start = text.find(needle)
    while start >= 0:
        end = start + len(needle)
        before = text[start - 1] if start else ""
        after = text[end:end + 2]
        if not (left and before and before in _BOUNDARY_BEFORE) and not (right and _continues_number(after)):
            return True
        start = text.find(needle, start + 1)
    return False


# The pattern's boundaries: (?<![\d.]) before and (?!\d|\.\d) after, with ASCII digits (re.ASCII).
_BOUNDARY_BEFORE = frozenset(_DIGITS + ".")


def _continues_number(after: str) -> bool:
    return bool(after) and (after[0] in _DIGITS or (after[0] == "." and len(after) > 1 and after[1] in _DIGITS))


# Folded texts hold no NUL: joined by it, they are searched at once without a match across two of them.
SEPARATOR = "\x00"


@lru_cache(maxsize=8192)  # a merge asks again for every number the conversation holds
def value_needle(value: str) -> str:
    """Return what value_present looks for, without whitespace: value_present(value, t) implies that
    value_needle(value) is a substring of value_haystack(t) (a cheap test that rules most texts out)."""
    return _SPACES.sub("", _canonical(value))


def value_haystack(text: str) -> str:
    """Return text as value_present reads it, without whitespace (see value_needle)."""
    return _stripped_text(text)


@lru_cache(maxsize=4096)
def _stripped_text(text: str) -> str:
    return _SPACES.sub("", _canonical_text(text))


# Assembly asks, for every candidate line, whether it states any superseded value: the same values and
# lines come back on every turn, so patterns and folded texts are remembered.
@lru_cache(maxsize=8192)
def _value_pattern(value: str) -> re.Pattern[str] | None:
    needle = _SPACES.sub("", _canonical(value))
    if not needle:
        return None
    # Whitespace may appear between any two characters ("12 万"), but it never joins two numbers.
    body = r"\s*".join(re.escape(char) for char in needle)
    # A number must not match inside a longer number: "3" is not present in "30" or "3.5".
    left = r"(?<![\d.])" if needle[0].isdigit() else ""
    right = r"(?!\d|\.\d)" if needle[-1].isdigit() else ""
    return re.compile(left + body + right, re.ASCII)


@lru_cache(maxsize=4096)
def _canonical_text(text: str) -> str:
    return _canonical(text)
