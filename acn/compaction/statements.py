"""Near-duplicate and same-topic tests for short zh/en statements (similarity itself is text.similarity)."""

from __future__ import annotations

import re
import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from functools import lru_cache

from acn.text.events import topic_key as events_topic_key
from acn.text.similarity import can_reach, normalise, shingle_similarity, shingles

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


@dataclass(frozen=True)
class _Statement:
    """What the near-duplicate test reads of a statement, computed once."""

    numbers: tuple[str, ...]
    folded: str
    grams: frozenset[str]

    @classmethod
    def of(cls, text: str) -> _Statement:
        return _statement(text)


# Every merge reads the statements of the merged segment again.
@lru_cache(maxsize=16384)
def _statement(text: str) -> _Statement:
    return _Statement(tuple(sorted(numbers_of(text))), normalise(text), shingles(text))


def is_near_duplicate(a: str, b: str, threshold: float = NEAR_DUPLICATE_THRESHOLD) -> bool:
    """Return True when two statements say the same thing (same numbers, near-identical wording)."""
    return _near(_Statement.of(a), _Statement.of(b), threshold)


def _near(a: _Statement, b: _Statement, threshold: float) -> bool:
    # "超时30秒" and "超时45秒" look alike but are different values: never merge across numbers.
    if a.numbers != b.numbers:
        return False
    left, right = a.folded, b.folded
    if left == right or (min(len(left), len(right)) >= MIN_CONTAINED and (left in right or right in left)):
        return True
    return can_reach(a.grams, b.grams, threshold) and shingle_similarity(a.grams, b.grams) >= threshold


def dedupe_keep_latest(items: list[str], *, head: int = 0) -> list[str]:
    """Drop every item that a later item near-duplicates; the survivors keep their order.

    A merged segment gathers the statements of a whole conversation, and every compaction merges it again with
    the newest segments. When the first `head` items are a list this function returned before (so no item of
    it has a later near-duplicate within it), only pairs with a newer item are compared: a compaction then costs
    the newest statements times the kept ones, not every pair of the conversation.
    """
    incremental = bool(head) and _was_deduped(items[:head])
    # A copy is a near-duplicate of its text, so only the last copy of each text can survive; dropping the
    # others first leaves every item the same later texts. Segments repeat most items (each carries the
    # constraints in force), and a merge would otherwise compare every copy with every other.
    last = {item: index for index, item in enumerate(items)}
    if len(last) < len(items):
        keep = [index for index, item in enumerate(items) if last[item] == index]
        head = sum(1 for index in keep if index < head)
        items = [items[index] for index in keep]
    statements = [_Statement.of(item) for item in items]
    if incremental:
        older, newer = statements[:head], statements[head:]
        dropped = _near_any(older, newer, NEAR_DUPLICATE_THRESHOLD)
        kept = [item for item, gone in zip(items[:head], dropped, strict=True) if not gone]
        result = kept + _dedupe(items[head:], newer)
    else:
        result = _dedupe(items, statements)
    _remember_deduped(result)
    return result


def _near_any(older: list[_Statement], newer: list[_Statement], threshold: float) -> list[bool]:
    """Return, for each older statement, whether some newer one near-duplicates it (exactly `_near`).

    A merge compares the conversation's kept statements (hundreds) with the newest (a few dozen); a pair loop
    made that the cost of every late compaction. Here equal texts are a set lookup, containment one substring
    search of the newer texts joined (folded texts hold no separator) or of each older text, and the Dice test
    runs only for sizes `can_reach` allows, found by bisection.
    """
    buckets: dict[tuple[str, ...], list[_Statement]] = {}
    for statement in newer:
        buckets.setdefault(statement.numbers, []).append(statement)
    groups = {numbers: _Group(members) for numbers, members in buckets.items()}
    result = []
    for statement in older:
        group = groups.get(statement.numbers)
        result.append(group is not None and group.near(statement, threshold))
    return result


class _Group:
    """Newer statements that share their numbers, indexed for `_near_any`."""

    def __init__(self, statements: list[_Statement]) -> None:
        self.folded = {s.folded for s in statements}
        self.long = [s.folded for s in statements if len(s.folded) >= MIN_CONTAINED]
        self.joined = SEPARATOR.join(self.long)
        by_size = sorted((len(s.grams), index) for index, s in enumerate(statements) if s.grams)
        self.sizes = [size for size, _ in by_size]
        self.by_size = [statements[index] for _, index in by_size]

    def near(self, statement: _Statement, threshold: float) -> bool:
        """Return True when a statement of the group near-duplicates this one (same numbers assumed)."""
        folded = statement.folded
        if folded in self.folded:
            return True
        if len(folded) >= MIN_CONTAINED and (folded in self.joined or any(other in folded for other in self.long)):
            return True
        size = len(statement.grams)
        if not size:
            return False
        # can_reach needs 2·min/(a+b) ≥ threshold: sizes within [size·t/(2−t), size·(2−t)/t] (one wider each
        # way against rounding; can_reach itself decides).
        low = bisect_left(self.sizes, size * threshold / (2 - threshold) - 1)
        high = bisect_right(self.sizes, size * (2 - threshold) / threshold + 1)
        return any(can_reach(statement.grams, other.grams, threshold)
                   and shingle_similarity(statement.grams, other.grams) >= threshold
                   for other in self.by_size[low:high])


class NearIndex:
    """Statements by position and numbers, to find the first later near-duplicate of one (exactly `_near`).

    Kept apart from text.similarity.PrefixFilter and memory.dedup_index.DedupIndex: `_near` is not Dice alone (equal
    numbers first, then containment, then Dice), and a merge asks in conversation order ("the first after"), over a
    few hundred statements where grouping by numbers already leaves a handful to compare.
    """

    def __init__(self, texts: list[tuple[int, str]]) -> None:
        self.groups: dict[tuple[str, ...], tuple[list[int], list[_Statement]]] = {}
        for position, text in texts:  # positions ascending
            statement = _Statement.of(text)
            positions, statements = self.groups.setdefault(statement.numbers, ([], []))
            positions.append(position)
            statements.append(statement)

    def first_after(self, text: str, lowest: int, below: int | None = None) -> int | None:
        """Return the smallest position in [lowest, below) whose statement near-duplicates text, else None."""
        statement = _Statement.of(text)
        group = self.groups.get(statement.numbers)
        if group is None:
            return None  # different numbers are never near-duplicates
        positions, statements = group
        for at in range(bisect_left(positions, lowest), len(positions)):
            if below is not None and positions[at] >= below:
                return None
            if _near(statements[at], statement, NEAR_DUPLICATE_THRESHOLD):
                return positions[at]
        return None


# Containment counts when the shorter text has at least this many characters (see _near).
MIN_CONTAINED = 6
SEPARATOR = "\x00"


# Lists this process's dedupe returned, by (hash, length): a merged segment's lists come back at the next merge.
_DEDUPED: OrderedDict[tuple[int, int], None] = OrderedDict()
_DEDUPED_KEPT = 4096
_DEDUPED_LOCK = threading.Lock()


def _was_deduped(items: list[str]) -> bool:
    with _DEDUPED_LOCK:
        return (hash(tuple(items)), len(items)) in _DEDUPED


def _remember_deduped(items: list[str]) -> None:
    with _DEDUPED_LOCK:
        _DEDUPED[(hash(tuple(items)), len(items))] = None
        while len(_DEDUPED) > _DEDUPED_KEPT:
            _DEDUPED.popitem(last=False)


def _dedupe(items: list[str], statements: list[_Statement]) -> list[str]:
    """Return the items no later item near-duplicates, comparing only items with the same numbers."""
    by_numbers: dict[tuple[str, ...], list[int]] = {}
    for index, statement in enumerate(statements):
        by_numbers.setdefault(statement.numbers, []).append(index)
    return [item for index, (item, statement) in enumerate(zip(items, statements, strict=True))
            if not any(_near(statement, statements[j], NEAR_DUPLICATE_THRESHOLD)
                       for j in by_numbers[statement.numbers] if j > index)]


# The topic keys of one compaction, by text: a compaction compares every statement with many others, and a key
# costs a dozen regex searches. Per call (a context variable), not per process: nothing outlives the request.
_TOPIC_KEYS: ContextVar[dict[str, str | None] | None] = ContextVar("acn_topic_keys", default=None)


@contextmanager
def topic_keys_cached() -> Iterator[None]:
    """Within this block (one compaction) each text's topic key is computed once; nested blocks share it."""
    if _TOPIC_KEYS.get() is not None:
        yield
        return
    token = _TOPIC_KEYS.set({})
    try:
        yield
    finally:
        _TOPIC_KEYS.reset(token)


def topic_key(text: str) -> str | None:
    """Return the parameter a statement sets ("超时改成45秒" -> "超时"), if any.

    The memory nodes' key (text.events) comes first so compaction and memory agree on topics; the
    leading noun phrase before a change verb or a value covers what it leaves out ("pool size is now 20").
    """
    keys = _TOPIC_KEYS.get()
    if keys is None:
        return _topic_key(text)
    if text not in keys:
        keys[text] = _topic_key(text)
    return keys[text]


def _topic_key(text: str) -> str | None:
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
    return keys_match(topic_key(a), topic_key(b))


def keys_match(left: str | None, right: str | None) -> bool:
    """Return True when two topic keys name the same parameter: one is a prefix or a suffix of the other."""
    if not left or not right:
        return False
    # Chinese puts modifiers before the head noun ("转账接口的超时" is about "超时"), English often
    # does too ("connection pool size"); a qualifier after it ("超时时间") is covered by startswith.
    shorter, longer = sorted((left, right), key=len)
    return longer.startswith(shorter) or longer.endswith(shorter)


class TopicIndex:
    """Topic keys by position, so that "which of these statements is on the same topic" is a few dict lookups.

    `keys_match` holds when one key is a prefix or a suffix of the other. A key is filed under itself (exact)
    and under each of its prefixes and suffixes (covering); a query key looks itself up in covering (the keys
    it is a part of) and its own prefixes and suffixes, of the lengths filed, in exact (the keys part of it).
    """

    def __init__(self, keys: list[tuple[int, str | None]]) -> None:
        self.exact: dict[str, list[int]] = {}
        self.covering: dict[str, list[int]] = {}
        for position, key in keys:  # positions ascending
            if not key:
                continue
            self.exact.setdefault(key, []).append(position)
            for affix in {key[:size] for size in range(1, len(key))} | {key[-size:] for size in range(1, len(key))}:
                self.covering.setdefault(affix, []).append(position)
        self.sizes = sorted({len(key) for key in self.exact})

    def first_after(self, key: str | None, lowest: int) -> int | None:
        """Return the smallest filed position ≥ lowest whose key matches key (None when there is none)."""
        if not key:
            return None
        lists = [self.covering.get(key)]
        for size in self.sizes:
            if size > len(key):
                break
            lists += [self.exact.get(key[:size]), self.exact.get(key[-size:])]
        best: int | None = None
        for positions in lists:
            if positions:
                at = bisect_left(positions, lowest)
                if at < len(positions) and (best is None or positions[at] < best):
                    best = positions[at]
        return best
