"""Find the numbers, dates, amounts, IDs and codes a summary must never lose."""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache, reduce
from itertools import repeat
from operator import or_

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


# Full-width digits, letters and the symbols used around numbers map one-to-one to ASCII, so
# matching on the folded copy keeps offsets valid for slicing the original text.
_FOLD = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F) if chr(code) not in "，；。！？（）"}
_FOLD[0x3000] = 0x20

_NUM = r"\d+(?:,\d{3})*(?:\.\d+)?"
_L = r"(?<![A-Za-z0-9_.])"  # left edge: not inside a word or a longer number
_R = r"(?![A-Za-z0-9_])"  # right edge for values ending in a digit or a Latin unit
_ZH_DIGIT = "零一二两三四五六七八九十"
_ZH_NUM = f"[{_ZH_DIGIT}][{_ZH_DIGIT}百千]*"
_MONTHS = r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Sept|Oct|Nov|Dec)[a-z]*\.?"
_CURRENCY_WORDS = r"(?:元|块钱|块|美元|美金|人民币|港币|欧元|日元|英镑|韩元)"
_COUNTERS = "次个人条行字件名位家台张份页轮篇户"


def _compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """Compile with ASCII classes: superscripts and other Unicode digits are not numbers here."""
    return re.compile(pattern, flags | re.ASCII)


# (kind, pattern); a named group "v" narrows the value inside a wider match.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("email", _compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}")),
    ("phone", _compile(r"(?<!\d)(?:\+?86[-\s]?)?1[3-9]\d[-\s]?\d{4}[-\s]?\d{4}(?!\d)")),
    ("phone", _compile(r"(?<!\d)0\d{2,3}-\d{7,8}(?!\d)")),
    ("date", _compile(r"(?<!\d)\d{4}\s?年\s?\d{1,2}\s?月(?:\s?\d{1,2}\s?[日号])?")),
    ("date", _compile(r"(?<!\d)\d{1,2}\s?月\s?\d{1,2}\s?[日号]")),
    ("date", _compile(rf"[{_ZH_DIGIT}]{{1,3}}月[{_ZH_DIGIT}]{{1,3}}[日号]")),
    ("date", _compile(r"(?<![\d.])\d{4}([-/.])(?:0?[1-9]|1[0-2])\1(?:0?[1-9]|[12]\d|3[01])(?![\d.])")),
    ("date", _compile(r"(?<!\d)(?:0?[1-9]|1[0-2])/(?:0?[1-9]|[12]\d|3[01])/\d{4}(?!\d)")),
    ("date", _compile(rf"(?<![A-Za-z]){_MONTHS}\s\d{{1,2}}(?:st|nd|rd|th)?(?:,?\s\d{{4}})?(?!\d)")),
    ("date", _compile(rf"(?<!\d)\d{{1,2}}(?:st|nd|rd|th)?\s{_MONTHS}(?:,?\s\d{{4}})?(?!\d)")),
    ("date", _compile(r"(?<!\d)(?:19|20)\d{2}\s?年(?![\d个])")),
    ("time", _compile(r"(?<![\d:])(?:[01]?\d|2[0-3]):[0-5]\d(?::[0-5]\d)?(?:\s?[AaPp]\.?[Mm]\.?)?(?![\d:])")),
    ("time", _compile(r"(?<!\d)(?:1[0-2]|0?[1-9])\s?(?:am|pm|a\.m\.|p\.m\.)(?![A-Za-z])", re.IGNORECASE)),
    (
        "time",
        _compile(
            rf"(?:上午|下午|晚上|早上|凌晨|中午|傍晚|今晚|明早)(?:\d{{1,2}}|[{_ZH_DIGIT}]{{1,3}})[点时]"
            rf"(?:\d{{1,2}}分|半|一刻|整)?"
        ),
    ),
    ("time", _compile(r"(?<!\d)\d{1,2}[点时](?:\d{1,2}分|半|一刻|整)")),
    (
        "amount",
        _compile(rf"(?:[¥￥$€£]|US\$|HK\$|(?:USD|RMB|CNY|EUR)\s?){_NUM}(?:\s?[万亿kKmM](?![A-Za-z]))?"),
    ),
    ("amount", _compile(rf"{_L}{_NUM}\s?(?:万|亿|千|百)?\s?{_CURRENCY_WORDS}")),
    ("amount", _compile(rf"{_L}{_NUM}\s?(?:USD|RMB|CNY|EUR|dollars?|yuan|euros?|bucks){_R}", re.IGNORECASE)),
    ("amount", _compile(rf"{_L}{_NUM}[万亿](?![{_COUNTERS}])")),
    ("amount", _compile(rf"{_ZH_NUM}(?:万|亿)?{_CURRENCY_WORDS}")),
    ("amount", _compile(rf"[一二两三四五六七八九十][{_ZH_DIGIT}百千]*[万亿](?![{_COUNTERS}])")),
    ("percent", _compile(rf"{_L}{_NUM}\s?(?:%|‰|percent\b|pct\b)")),
    ("percent", _compile(rf"百分之[{_ZH_DIGIT}百点]+")),
    (
        "duration",
        _compile(
            rf"{_L}{_NUM}\s?(?:毫秒|秒钟|秒|分钟|个小时|小时|个钟头|个月|天|周|个星期|星期|个工作日|工作日)"
        ),
    ),
    ("duration", _compile(rf"{_L}\d{{1,3}}\s?年(?![\d级])")),
    (
        "duration",
        _compile(
            rf"{_L}{_NUM}\s?(?:ms|milliseconds?|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?|days?|weeks?|"
            rf"months?|years?){_R}",
            re.IGNORECASE,
        ),
    ),
    ("duration", _compile(rf"(?:{_ZH_NUM}|半)个?(?:秒钟|分钟|小时|钟头|天|周|星期|个月|工作日)")),
    ("version", _compile(r"(?<![A-Za-z0-9_.])[vV]\d+(?:\.\d+){0,3}(?:-[0-9A-Za-z.]+)?(?![\w.]*\d)")),
    ("version", _compile(r"(?<![\w.])\d+\.\d+\.\d+(?:\.\d+)?(?:-[0-9A-Za-z.]+)?(?![\w.])")),
    (
        "version",
        _compile(
            r"(?:python|node|java|go|php|ruby|rust|mysql|postgres(?:ql)?|redis|milvus|版本|version|ver\.?)"
            r"\s?(?:号|为|是|:)?\s?(?P<v>\d+\.\d+)(?![\d.])",
            re.IGNORECASE,
        ),
    ),
    (
        "id",
        _compile(
            r"(?<![A-Za-z0-9_-])(?=[A-Za-z0-9_-]*\d)[A-Za-z][A-Za-z0-9]*(?:[-_][A-Za-z0-9]+)+(?![A-Za-z0-9_-])"
        ),
    ),
    ("id", _compile(r"(?<![A-Za-z0-9_])#\d{3,}(?!\d)")),
    ("id", _compile(r"(?<![A-Za-z0-9_])[A-Z]{1,8}\d{3,}[A-Z0-9]*(?![A-Za-z0-9_])")),
    ("id", _compile(r"(?<![A-Za-z0-9_])(?=[a-f0-9]*[a-f])(?=[a-f0-9]*\d)[a-f0-9]{7,64}(?![A-Za-z0-9_])")),
    ("account", _compile(r"(?<!\d)\d{4}(?:[ -]\d{4}){2,3}(?:[ -]?\d{1,3})?(?!\d)")),
    ("account", _compile(r"(?<![\d.])\d{6,}(?![\d.])")),
    ("number", _compile(r"(?P<k>[A-Za-z_][A-Za-z0-9_]*)\s?(?:=|:|：)\s?(?P<v>-?\d+(?:\.\d+)?)(?![\d.])")),
    (
        "number",
        _compile(
            rf"{_L}{_NUM}\s?(?:[KMGT]i?B|tokens?|[{_COUNTERS}]|倍|折|度|℃|°C|km|kg|公里|公斤|米|克|字节|像素|px){_R}"
        ),
    ),
    ("number", _compile(rf"(?<![\d.]){_NUM}(?![\d])")),
]

# What each pattern of _PATTERNS (same order) cannot match without: sets of characters, the text must hold one
# character of every set (read off the pattern's mandatory literals; re.ASCII keeps IGNORECASE to ASCII letters).
# Most chat sentences have no digit: they skip 33 of the 39 passes (tests/test_text_numbers_prefilter.py proves the
# guarded loop returns what the full loop does). A guard may be loose, never tight: when unsure, leave a set out.
_D = frozenset("0123456789")
_ZH_DIGITS = frozenset(_ZH_DIGIT)
_WS = frozenset(" \t\n\r\f\v")  # \s under re.ASCII
_MONTH_INITIALS = frozenset("JFMASOND")
_CURRENCY_INITIALS = frozenset("元块美人港欧日英韩")
_UPPER = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_LETTERS = _UPPER | frozenset("abcdefghijklmnopqrstuvwxyz")
_ZH_DURATION_UNITS = frozenset("毫秒分个小天周星工")


def _any(chars: str) -> frozenset[str]:
    return frozenset(chars)


_NEEDS: list[tuple[frozenset[str], ...]] = [
    (_any("@"), _any(".")),  # email
    (_any("1"),),  # mobile: 1[3-9]...
    (_any("0"), _any("-")),  # landline: 0xx-
    (_any("年"), _any("月"), _D),  # 2026年6月
    (_any("月"), _any("日号"), _D),  # 6月30日
    (_any("月"), _any("日号"), _ZH_DIGITS),  # 六月三十日
    (_any("-/."), _D),  # 2025-03-17
    (_any("/"), _D),  # 3/17/2025
    (_MONTH_INITIALS, _WS, _D),  # March 5
    (_MONTH_INITIALS, _WS, _D),  # 5 March
    (_any("年"), _D),  # 2025年
    (_any(":"), _D),  # 14:30
    (_any("aApP"), _any("mM"), _D),  # 3pm
    (_any("点时"), _any("上下晚早凌中傍今明")),  # 下午三点
    (_any("点时"), _D),  # 3点半
    (_any("¥￥$€£URCE"), _D),  # ¥239, US$, USD 5
    (_CURRENCY_INITIALS, _D),  # 239元
    (_any("uUrRcCeEdDyYbB"), _D),  # 300 USD, 5 dollars, 5 bucks
    (_any("万亿"), _D),  # 12万
    (_ZH_DIGITS, _CURRENCY_INITIALS),  # 三千元
    (_any("万亿"), _any("一二两三四五六七八九十")),  # 三万
    (_any("%‰p"), _D),  # 15%, 15 percent
    (_any("百"), _any("分"), _any("之")),  # 百分之十五
    (_ZH_DURATION_UNITS, _D),  # 30秒
    (_any("年"), _D),  # 3年
    (_any("mMsShHdDwWyY"), _D),  # 45 seconds
    (_ZH_DIGITS | _any("半"), _any("秒分小钟天周星个工")),  # 三天, 半小时
    (_any("vV"), _D),  # v2.1
    (_any("."), _D),  # 2.1.0
    (_any("."), _D),  # Python 3.11
    (_any("-_"), _LETTERS, _D),  # ORD-2025
    (_any("#"), _D),  # #12345
    (_UPPER, _D),  # TK99812
    (_any("abcdef"), _D),  # 3f9a2c1
    (_any(" -"), _D),  # 6222 0212 3456 7890
    (_D,),  # 62938471
    (_any("=:："), _D),  # timeout=30
    (_D,),  # 2 tokens, 10倍
    (_D,),  # any number
]


# Each distinct set of _NEEDS is a bit; a text's mask has the bits of the sets it draws a character from, and a
# pattern runs when its bits are all in the mask. The runnable patterns of a mask are remembered (few masks occur).
def _bit_tables() -> tuple[dict[str, int], list[int]]:
    """Return each character's bits and each pattern's bits."""
    need_bits = {need: 1 << index for index, need in enumerate(dict.fromkeys(n for needs in _NEEDS for n in needs))}
    char_bits: dict[str, int] = {}
    for need, bit in need_bits.items():
        for char in need:
            char_bits[char] = char_bits.get(char, 0) | bit
    return char_bits, [reduce(or_, (need_bits[need] for need in needs), 0) for needs in _NEEDS]


_CHAR_BITS, _PATTERN_BITS = _bit_tables()


def _mask(folded: str) -> int:
    """Return the bits of the _NEEDS sets folded draws a character from (one pass over its distinct characters)."""
    return reduce(or_, map(_CHAR_BITS.get, set(folded), repeat(0)), 0)


@lru_cache(maxsize=4096)
def _runnable(mask: int) -> tuple[int, ...]:
    """Return the indexes of the patterns a text of this mask may match."""
    return tuple(index for index, bits in enumerate(_PATTERN_BITS) if mask & bits == bits)


class _RunThenTail:
    """finditer of a pattern `head tail` in linear time, where head ends in a run of characters tail cannot start
    with (so a match's head reaches the end of its run).

    The regex engine tries a failing pattern again from every character of a long run ("ab_ab_…" before no "=",
    "一一一…" before no unit): quadratic, 20 s for 24,000 characters. Every start inside one run ends it at the same
    place and fails or succeeds alike, and the leftmost start wins: so the head is found once (leftmost, greedy)
    and the tail tried once at its end. Same spans as the pattern's finditer (tests/test_text_numbers_prefilter.py).
    """

    def __init__(self, head: str, tail: str, group: str | None = None) -> None:
        self.head, self.tail, self.group = _compile(head), _compile(tail), group

    def spans(self, text: str) -> Iterator[tuple[int, int]]:
        at = 0
        while (run := self.head.search(text, at)) is not None:
            match = self.tail.match(text, run.end())
            if match is None:
                at = run.end()  # any later start inside the run fails the same way
                continue
            yield match.span(self.group) if self.group else (run.start(), match.end())
            at = match.end()


# Linear finders for the patterns of _PATTERNS (by index) that backtrack quadratically on long runs; each is the
# pattern cut where its run ends.
_LINEAR: dict[int, _RunThenTail] = {
    0: _RunThenTail(r"[A-Za-z0-9._%+-]+", r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    19: _RunThenTail(_ZH_NUM, rf"(?:万|亿)?{_CURRENCY_WORDS}"),
    20: _RunThenTail(rf"[一二两三四五六七八九十][{_ZH_DIGIT}百千]*", rf"[万亿](?![{_COUNTERS}])"),
    26: _RunThenTail(rf"{_ZH_NUM}|半", r"个?(?:秒钟|分钟|小时|钟头|天|周|星期|个月|工作日)"),
    36: _RunThenTail(r"[A-Za-z_][A-Za-z0-9_]*", r"\s?(?:=|:|：)\s?(?P<v>-?\d+(?:\.\d+)?)(?![\d.])", "v"),
}


def _spans(priority: int, folded: str) -> Iterator[tuple[int, int]]:
    """Return the spans of pattern `priority` in folded (its "v" group when it has one)."""
    linear = _LINEAR.get(priority)
    if linear is not None:
        yield from linear.spans(folded)
        return
    pattern = _PATTERNS[priority][1]
    if "v" in pattern.groupindex:
        yield from (match.span("v") for match in pattern.finditer(folded))
    else:
        yield from (match.span() for match in pattern.finditer(folded))


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
    spans = _select_spans(_candidates(text.translate(_FOLD)))
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
    # Patterns missing a character they cannot match without are skipped (_NEEDS): same result, fewer passes.
    for priority in _runnable(_mask(folded)):
        kind = _PATTERNS[priority][0]
        for start, end in _spans(priority, folded):
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
    return _THOUSANDS.sub("", text.translate(_FOLD).replace("￥", "¥"))


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
