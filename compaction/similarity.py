"""Near-duplicate and same-topic tests for short zh/en statements (similarity itself is text.similarity)."""

from __future__ import annotations

import re

from text.events import topic_key as events_topic_key
from text.similarity import normalise, shingles, similarity

NEAR_DUPLICATE_THRESHOLD = 0.8
MAX_TOPIC_CHARS = 24

_DIGITS = re.compile(r"\d+(?:\.\d+)?")
# A number that starts a value ("超时30秒", "pool 20"), not one inside an identifier ("eu-west-1").
_VALUE_DIGIT = re.compile(r"(?<![A-Za-z0-9_.\-])\d")
_ZH_CHANGE = re.compile(
    r"(?:设置为|设置成|设为|设成|改为|改成|改到|换成|换为|调整为|调整到|调成|调到|定为|更新为|=|＝)"
)
_ZH_LEAD = re.compile(r"^(?:好的|可以|那就|那|就|我们|咱们|请|帮我|麻烦|已经|已|把|将|还是|再|先|给|您|你)+")
_ZH_TRAIL = re.compile(r"(?:的|是|为|用|要|在|于|到|设置|时间)+$")
_ZH_PERSON = re.compile(r"[我你您他她咱]")
_EN_VERB = re.compile(
    r"^(?:let'?s\s+|please\s+|we\s+|i\s+)?(?:set|change|switch|update|make|move|increase|decrease|raise|lower|bump)"
    r"\s+(?:the\s+|our\s+|my\s+)?(?P<topic>.+?)\s+(?:to|from)\b",
    re.IGNORECASE,
)
_EN_STATE = re.compile(
    r"^(?:the\s+|our\s+|my\s+)?(?P<topic>.+?)\s+(?:is now|changed to|is set to|set to|should be|will be|=)\s",
    re.IGNORECASE,
)
_EN_LEAD = re.compile(
    r"^(?:(?:done|ok|okay|so|then|and|the|our|my|a|now|great|sure|alright|also)[,\s]+)+", re.IGNORECASE
)
_EN_TRAIL_WORDS = frozenset({"is", "are", "was", "of", "at", "on", "in", "to", "be", "by", "for", "about"})
_EN_PERSON_WORDS = frozenset({"i", "you", "we", "he", "she", "they", "me", "us"})


def coverage(old: str, new: str) -> float:
    """Return the share of old's character bigrams that new contains (1.0 when new says all of old)."""
    first = shingles(old)
    if not first:
        return 1.0
    return len(first & shingles(new)) / len(first)


def numbers_of(text: str) -> list[str]:
    """Return the digit runs of text, in order."""
    return _DIGITS.findall(text)


def is_near_duplicate(a: str, b: str, threshold: float = NEAR_DUPLICATE_THRESHOLD) -> bool:
    """Return True when two statements say the same thing (same numbers, near-identical wording)."""
    # "超时30秒" and "超时45秒" look alike but are different values: never merge across numbers.
    if sorted(numbers_of(a)) != sorted(numbers_of(b)):
        return False
    left, right = normalise(a), normalise(b)
    if left == right or (min(len(left), len(right)) >= 6 and (left in right or right in left)):
        return True
    return similarity(a, b) >= threshold


def dedupe_keep_latest(items: list[str]) -> list[str]:
    """Drop every item that a later item near-duplicates; the survivors keep their order."""
    kept: list[str] = []
    for index, item in enumerate(items):
        if not any(is_near_duplicate(item, later) for later in items[index + 1 :]):
            kept.append(item)
    return kept


def topic_key(text: str) -> str | None:
    """Return the parameter a statement sets ("超时改成45秒" -> "超时"), if any.

    The memory nodes' key (text.events) comes first so compaction and memory agree on topics; the
    leading noun phrase before a change verb or a value covers what it leaves out ("pool size is now 20").
    """
    stripped = text.strip()
    shared = events_topic_key(stripped, "decision")
    if shared:
        return shared.replace("_", " ")
    head = _zh_topic(stripped) if re.search(r"[\u4e00-\u9fff]", stripped) else _en_topic(stripped)
    if not head or len(head) > MAX_TOPIC_CHARS:
        return None
    return head


def _zh_topic(text: str) -> str | None:
    change = _ZH_CHANGE.search(text)
    digit = _VALUE_DIGIT.search(text)
    cut = change.start() if change else (digit.start() if digit else -1)
    if cut <= 0:
        return None
    head = text[:cut]
    head = head.split("，")[-1].split(",")[-1]
    head = _ZH_TRAIL.sub("", _ZH_LEAD.sub("", normalise(head)))
    # "我要在2026年…" is a statement about the speaker, not a parameter name.
    if len(head) < 2 or _ZH_PERSON.search(head):
        return None
    return head


def _en_topic(text: str) -> str | None:
    match = _EN_VERB.match(text) or _EN_STATE.match(text)
    if match:
        head = match.group("topic")
    else:
        digit = _VALUE_DIGIT.search(text)
        if not digit or digit.start() == 0:
            return None
        head = text[: digit.start()]
    words = re.findall(r"[a-z][a-z_'-]*", _EN_LEAD.sub("", head.strip().lower()))
    while words and words[-1] in _EN_TRAIL_WORDS:
        words.pop()
    if not words or len(words) > 4 or _EN_PERSON_WORDS & set(words):
        return None
    return " ".join(words)


def same_topic(a: str, b: str) -> bool:
    """Return True when two statements set the same parameter."""
    left, right = topic_key(a), topic_key(b)
    if not left or not right:
        return False
    # Chinese puts modifiers before the head noun ("转账接口的超时" is about "超时"), English often
    # does too ("connection pool size"); a qualifier after it ("超时时间") is covered by startswith.
    shorter, longer = sorted((left, right), key=len)
    return longer.startswith(shorter) or longer.endswith(shorter)
