"""The patterns that find key values in text, and the guards that keep them fast.

acn/text/numbers.py picks, labels and compares what these find; this module only says where a value may be: each
pattern with the characters it cannot match without (most chat sentences skip most patterns) and linear finders
for the patterns that backtrack quadratically on long runs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache, reduce
from itertools import repeat
from operator import or_

# Full-width digits, letters and the symbols used around numbers map one-to-one to ASCII, so
# matching on the folded copy keeps offsets valid for slicing the original text.
FOLD = {code: code - 0xFEE0 for code in range(0xFF01, 0xFF5F) if chr(code) not in "，；。！？（）"}
FOLD[0x3000] = 0x20

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
PATTERNS: list[tuple[str, re.Pattern[str]]] = [
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

# What each pattern of PATTERNS (same order) cannot match without: sets of characters, the text must hold one
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


NEEDS: list[tuple[frozenset[str], ...]] = [
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


# Each distinct set of NEEDS is a bit; a text's mask has the bits of the sets it draws a character from, and a
# pattern runs when its bits are all in the mask. The runnable patterns of a mask are remembered (few masks occur).
def _bit_tables() -> tuple[dict[str, int], list[int]]:
    """Return each character's bits and each pattern's bits."""
    need_bits = {need: 1 << index for index, need in enumerate(dict.fromkeys(n for needs in NEEDS for n in needs))}
    char_bits: dict[str, int] = {}
    for need, bit in need_bits.items():
        for char in need:
            char_bits[char] = char_bits.get(char, 0) | bit
    return char_bits, [reduce(or_, (need_bits[need] for need in needs), 0) for needs in NEEDS]


_CHAR_BITS, _PATTERN_BITS = _bit_tables()


def char_mask(folded: str) -> int:
    """Return the bits of the NEEDS sets folded draws a character from (one pass over its distinct characters)."""
    return reduce(or_, map(_CHAR_BITS.get, set(folded), repeat(0)), 0)


@lru_cache(maxsize=4096)
def runnable(mask: int) -> tuple[int, ...]:
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


# Linear finders for the patterns of PATTERNS (by index) that backtrack quadratically on long runs; each is the
# pattern cut where its run ends.
LINEAR: dict[int, _RunThenTail] = {
    0: _RunThenTail(r"[A-Za-z0-9._%+-]+", r"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
    19: _RunThenTail(_ZH_NUM, rf"(?:万|亿)?{_CURRENCY_WORDS}"),
    20: _RunThenTail(rf"[一二两三四五六七八九十][{_ZH_DIGIT}百千]*", rf"[万亿](?![{_COUNTERS}])"),
    26: _RunThenTail(rf"{_ZH_NUM}|半", r"个?(?:秒钟|分钟|小时|钟头|天|周|星期|个月|工作日)"),
    36: _RunThenTail(r"[A-Za-z_][A-Za-z0-9_]*", r"\s?(?:=|:|：)\s?(?P<v>-?\d+(?:\.\d+)?)(?![\d.])", "v"),
}


def pattern_spans(priority: int, folded: str) -> Iterator[tuple[int, int]]:
    """Return the spans of pattern `priority` in folded (its "v" group when it has one)."""
    linear = LINEAR.get(priority)
    if linear is not None:
        yield from linear.spans(folded)
        return
    pattern = PATTERNS[priority][1]
    if "v" in pattern.groupindex:
        yield from (match.span("v") for match in pattern.finditer(folded))
    else:
        yield from (match.span() for match in pattern.finditer(folded))
