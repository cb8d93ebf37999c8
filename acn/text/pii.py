"""Find and mask personal data: ID-card numbers, bank cards, mainland mobile numbers, e-mail addresses.

Detection runs on a normalised copy of the text (NFKC, so full-width digits and `＠` are plain ASCII; escape
sequences such as `\\u0001` or `\\x01` decoded, as they appear in JSON and in tracebacks; control characters as
spaces; invisible format characters dropped). Each match is mapped back to its span in the original text, and
only that span is replaced, so the rest of the text (and the JSON around it) is left byte for byte.
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

_DATE = r"(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
_SEP = r"(?:-|[ \t]{1,2})?"  # ID cards are written 6-8-4 or 6-4-4-4 with spaces or dashes
_ID_CARD_18 = re.compile(
    rf"(?<![\dA-Za-z])[1-9]\d{{5}}{_SEP}(?:18|19|20)\d{{2}}{_SEP}{_DATE}{_SEP}\d{{3}}[\dXx](?![\dA-Za-z])",
    re.ASCII,
)
_ID_CARD_15 = re.compile(rf"(?<![\dA-Za-z])[1-9]\d{{5}}\d{{2}}{_DATE}\d{{3}}(?![\dA-Za-z])", re.ASCII)
_CARD_GROUPED = re.compile(r"(?<![\d-])\d{4}(?:[ -]\d{4}){3}(?:[ -]?\d{1,3})?(?![\d-])", re.ASCII)
_CARD_AMEX = re.compile(r"(?<![\d-])3[47]\d{2}[ -]\d{6}[ -]\d{5}(?![\d-])", re.ASCII)
_CARD_PLAIN = re.compile(r"(?<!\d)\d{16,19}(?!\d)", re.ASCII)
_CARD_WORDS = re.compile(r"(?:卡号|银行卡|信用卡|借记卡|储蓄卡|card)\D{0,6}$", re.IGNORECASE)
# Groups 3-4-4 separated by nothing, a dash, a dot or up to two spaces; an optional +86 / 0086 / (+86) prefix.
_PHONE_SEP = r"(?:[-.]|[ \t]{1,2})?"
_PHONE = re.compile(
    rf"(?<![\d.])((?:\(\+?86\)|\+86|0086|86)[- ]?)?(1[3-9]\d){_PHONE_SEP}(\d{{4}}){_PHONE_SEP}(\d{{4}})(?![\d]|\.\d)",
    re.ASCII,
)
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff66-\uff9f"
# E-mail: unicode mailboxes and domains ("用户@例子.中国", "josé@bücher.de"), found by _emails below.
_LEADING_CJK = re.compile(f"[{_CJK}]+")
_ESCAPE = re.compile(r"\\+(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[ntr])")
# Characters that may read differently once normalised: anything outside printable ASCII, and backslashes.
# CJK ideographs, kana, hangul syllables and "。、" read as themselves: skipping them keeps Chinese text fast.
_SPECIAL = re.compile(
    r"\\+(?:x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|[ntr])"
    r"|[^\x20-\x5b\x5d-\x7e\n\u3001\u3002\u3041-\u3096\u30a1-\u30fa\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7a3]"
)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}


@lru_cache(maxsize=4096)
def _normal_char(char: str) -> str:
    """Return what one character reads as for detection."""
    category = unicodedata.category(char)
    if category == "Cc":
        return char if char in "\n\t" else " "
    if category == "Cf":  # zero-width spaces and joiners, soft hyphens: invisible, so no separator
        return ""
    return unicodedata.normalize("NFKC", char)


def _decode(token: str) -> str:
    """Return the character an escape sequence (or a single character) stands for."""
    escape = _ESCAPE.fullmatch(token)
    if escape is None:
        return _normal_char(token)
    body = escape.group(1)
    if body in _SIMPLE_ESCAPES:
        return _SIMPLE_ESCAPES[body]
    code = int(body[1:], 16)
    if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
        return " "
    return "".join(_normal_char(char) for char in chr(code))


@dataclass
class _Normalised:
    """Text as detection reads it, with a way back to the original offsets."""

    text: str
    starts: list[int]  # normalised offset where each changed piece starts
    pieces: list[tuple[int, int, int, int]]  # (normalised start, normalised end, original start, original end)

    def span(self, start: int, end: int) -> tuple[int, int]:
        """Return the original span of the normalised span [start, end)."""
        return self._original(start, left=True), self._original(end - 1, left=False)

    def _original(self, offset: int, *, left: bool) -> int:
        index = bisect.bisect_right(self.starts, offset) - 1
        if index >= 0:
            n_start, n_end, o_start, o_end = self.pieces[index]
            if offset < n_end:
                return o_start if left else o_end
            return o_end + (offset - n_end) + (0 if left else 1)
        return offset + (0 if left else 1)


def _normalise(text: str) -> _Normalised:
    """Return text as detection reads it; changed pieces are recorded to map matches back."""
    out: list[str] = []
    starts: list[int] = []
    pieces: list[tuple[int, int, int, int]] = []
    position = length = 0
    for match in _SPECIAL.finditer(text):
        token = match.group(0)
        replacement = _decode(token)
        if replacement == token:
            continue
        out.append(text[position : match.start()])
        length += match.start() - position
        starts.append(length)
        pieces.append((length, length + len(replacement), match.start(), match.end()))
        out.append(replacement)
        length += len(replacement)
        position = match.end()
    out.append(text[position:])
    return _Normalised("".join(out), starts, pieces)


def _mask_id_card(match: re.Match[str]) -> str:
    """Keep the region code (first 6) and the last 4 characters."""
    value = re.sub(r"[^\dXx]", "", match.group(0))
    return value[:6] + "********" + value[-4:]


def _mask_card(match: re.Match[str]) -> str:
    """Keep only the last 4 digits, in the usual grouped form."""
    digits = re.sub(r"\D", "", match.group(0))
    return "**** **** **** " + digits[-4:]


def _mask_phone(match: re.Match[str]) -> str:
    """Keep the country prefix, the first 3 and the last 4 digits."""
    prefix = re.sub(r"\s", " ", match.group(1) or "")
    return f"{prefix}{match.group(2)}****{match.group(4)}"


def luhn_valid(digits: str) -> bool:
    """Return True when a digit string passes the Luhn check used by bank cards."""
    total = 0
    for position, char in enumerate(reversed(digits)):
        digit = int(char)
        if position % 2 == 1:
            digit = digit * 2 - 9 if digit > 4 else digit * 2
        total += digit
    return total % 10 == 0


def _is_plain_card(text: str, match: re.Match[str]) -> bool:
    """Accept an ungrouped 16-19 digit run as a card when it is Luhn-valid or called a card."""
    # Order numbers are long digit runs too; without a checksum or a card word they are left alone.
    return (
        luhn_valid(match.group(0))
        or _CARD_WORDS.search(text[max(0, match.start() - 12) : match.start()]) is not None
    )


def _is_amex(text: str, match: re.Match[str]) -> bool:
    return luhn_valid(re.sub(r"\D", "", match.group(0)))


Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]]
# ID cards before bank cards before phones (then e-mails): an 18-digit ID or a card is never read as a phone.
_RULES: list[Rule] = [
    ("id_card", _ID_CARD_18, _mask_id_card),
    ("id_card", _ID_CARD_15, _mask_id_card),
    ("bank_card", _CARD_GROUPED, _mask_card),
    ("bank_card", _CARD_AMEX, _mask_card),
    ("bank_card", _CARD_PLAIN, _mask_card),
    ("phone", _PHONE, _mask_phone),
]
_CHECKS: dict[re.Pattern[str], Callable[[str, re.Match[str]], bool]] = {
    _CARD_PLAIN: _is_plain_card, _CARD_AMEX: _is_amex,
}


@dataclass
class _Hit:
    kind: str
    start: int  # in the normalised text
    end: int
    mask: str


class _Claimed:
    """Non-overlapping spans already masked, sorted by start."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def overlaps(self, start: int, end: int) -> bool:
        index = bisect.bisect_left(self.starts, end)
        return index > 0 and self.ends[index - 1] > start

    def add(self, start: int, end: int) -> None:
        index = bisect.bisect_left(self.starts, start)
        self.starts.insert(index, start)
        self.ends.insert(index, end)


_LOCAL_EXTRA = frozenset(".%+-_")
_DOMAIN = re.compile(r"(?:[^\W_][\w-]*\.)+[^\W\d_]{2,}")


def _emails(text: str) -> list[tuple[int, int, str]]:
    """Return (start, end, mask) of every address: found at each "@", grown both ways (linear, not a scan)."""
    found: list[tuple[int, int, str]] = []
    at = text.find("@")
    while at != -1:
        domain = _DOMAIN.match(text, at + 1)
        start = at
        while start > 0 and (text[start - 1].isalnum() or text[start - 1] in _LOCAL_EXTRA):
            start -= 1
        if domain and start < at:
            # Chinese text glued to an address ("邮箱zhang@…") is not part of it, unless the mailbox is all CJK.
            leading = _LEADING_CJK.match(text, start, at)
            if leading and leading.end() < at:
                start = leading.end()
            found.append((start, domain.end(), f"{text[start]}***@{domain.group(0)}"))
        at = text.find("@", domain.end() if domain else at + 1)
    return found


def _hits(text: str) -> list[_Hit]:
    """Return the non-overlapping matches in the normalised text, earlier rules first."""
    hits: list[_Hit] = []
    claimed = _Claimed()
    for kind, pattern, mask in _RULES:
        check = _CHECKS.get(pattern)
        for match in pattern.finditer(text):
            if claimed.overlaps(match.start(), match.end()) or (check is not None and not check(text, match)):
                continue
            claimed.add(match.start(), match.end())
            hits.append(_Hit(kind, match.start(), match.end(), mask(match)))
    if "@" in text:
        for start, end, masked in _emails(text):
            if not claimed.overlaps(start, end):
                claimed.add(start, end)
                hits.append(_Hit("email", start, end, masked))
    return hits


def _redact(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Return the masked text and the (kind, original match) pairs, in rule order."""
    normal = _normalise(text)
    hits = _hits(normal.text)
    found: list[tuple[str, str]] = []
    spans: list[tuple[int, int, str]] = []
    for hit in hits:
        start, end = normal.span(hit.start, hit.end)
        found.append((hit.kind, text[start:end]))
        # A mask never carries a raw control character or line break into the text (or the JSON) around it.
        spans.append((start, end, "".join(c if c.isprintable() else " " for c in hit.mask)))
    for start, end, mask in sorted(spans, reverse=True):
        text = text[:start] + mask + text[end:]
    return text, found


def redact_pii(text: str) -> tuple[str, int]:
    """Return text with personal data masked and the number of redactions."""
    redacted, found = _redact(text)
    return redacted, len(found)


def find_pii(text: str) -> list[tuple[str, str]]:
    """Return the (kind, match) pairs redact_pii would mask, in rule order."""
    return _redact(text)[1]


def redact_value(value: Any) -> tuple[Any, int]:
    """Mask personal data in every string (and number) of a JSON value, keys included; return it and the count.

    A number that reads as personal data (a phone stored as an integer) becomes its masked string; a string
    holding a JSON object or list is masked inside and re-encoded.
    """
    if isinstance(value, str):
        # A string holding JSON (tool-call arguments) stays valid JSON once masked.
        return redact_json_text(value) if value.lstrip()[:1] in ("{", "[") else redact_pii(value)
    if isinstance(value, bool) or value is None:
        return value, 0
    if isinstance(value, (int, float)):
        masked, count = redact_pii(str(value))
        return (masked, count) if count else (value, 0)
    if isinstance(value, dict):
        total, result = 0, {}
        for key, item in value.items():
            new_key, key_count = redact_pii(str(key))
            new_item, item_count = redact_value(item)
            result[new_key] = new_item
            total += key_count + item_count
        return result, total
    if isinstance(value, (list, tuple)):
        items = [redact_value(item) for item in value]
        return [item for item, _ in items], sum(count for _, count in items)
    return value, 0


def redact_json_text(text: str) -> tuple[str, int]:
    """Mask a string that may hold JSON (tool-call arguments): structurally when it parses, as text otherwise."""
    try:
        value = json.loads(text)
    except ValueError:
        return redact_pii(text)
    if not isinstance(value, (dict, list)):
        return redact_pii(text)
    masked, count = redact_value(value)
    return (json.dumps(masked, ensure_ascii=False), count) if count else (text, 0)
