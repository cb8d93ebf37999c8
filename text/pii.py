"""Find and mask personal data: ID-card numbers, bank cards, mainland mobile numbers, e-mail addresses."""

from __future__ import annotations

import re
from collections.abc import Callable

_DATE = r"(?:0[1-9]|1[0-2])(?:0[1-9]|[12]\d|3[01])"
_ID_CARD_18 = re.compile(
    rf"(?<![\dA-Za-z])[1-9]\d{{5}}(?:18|19|20)\d{{2}}{_DATE}\d{{3}}[\dXx](?![\dA-Za-z])", re.ASCII
)
_ID_CARD_15 = re.compile(rf"(?<![\dA-Za-z])[1-9]\d{{5}}\d{{2}}{_DATE}\d{{3}}(?![\dA-Za-z])", re.ASCII)
_CARD_GROUPED = re.compile(r"(?<![\d-])\d{4}(?:[ -]\d{4}){3}(?:[ -]?\d{1,3})?(?![\d-])", re.ASCII)
_CARD_PLAIN = re.compile(r"(?<!\d)\d{16,19}(?!\d)", re.ASCII)
_CARD_WORDS = re.compile(r"(?:卡号|银行卡|信用卡|借记卡|储蓄卡|card)\D{0,6}$", re.IGNORECASE)
_PHONE = re.compile(r"(?<!\d)(\+?86[-\s]?)?(1[3-9]\d)[-\s]?(\d{4})[-\s]?(\d{4})(?!\d)", re.ASCII)
_EMAIL = re.compile(
    r"([A-Za-z0-9])[A-Za-z0-9._%+-]*@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,})", re.ASCII
)


def _mask_id_card(match: re.Match[str]) -> str:
    """Keep the region code (first 6) and the last 4 characters."""
    value = match.group(0)
    return value[:6] + "********" + value[-4:]


def _mask_card(match: re.Match[str]) -> str:
    """Keep only the last 4 digits, in the usual grouped form."""
    digits = re.sub(r"\D", "", match.group(0))
    return "**** **** **** " + digits[-4:]


def _mask_phone(match: re.Match[str]) -> str:
    """Keep the country prefix, the first 3 and the last 4 digits."""
    prefix = match.group(1) or ""
    return f"{prefix}{match.group(2)}****{match.group(4)}"


def _mask_email(match: re.Match[str]) -> str:
    """Keep the first character of the local part and the domain."""
    return f"{match.group(1)}***@{match.group(2)}"


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


Rule = tuple[str, re.Pattern[str], Callable[[re.Match[str]], str]]
# ID cards before bank cards before phones: an 18-digit ID or a card must not be read as a phone number.
_RULES: list[Rule] = [
    ("id_card", _ID_CARD_18, _mask_id_card),
    ("id_card", _ID_CARD_15, _mask_id_card),
    ("bank_card", _CARD_GROUPED, _mask_card),
    ("bank_card", _CARD_PLAIN, _mask_card),
    ("phone", _PHONE, _mask_phone),
    ("email", _EMAIL, _mask_email),
]


def _apply(text: str, rule: Rule, found: list[tuple[str, str]]) -> str:
    """Mask every match of one rule in text, recording (kind, match) in found."""
    kind, pattern, mask = rule

    def replace(match: re.Match[str]) -> str:
        if pattern is _CARD_PLAIN and not _is_plain_card(text, match):
            return match.group(0)
        found.append((kind, match.group(0)))
        return mask(match)

    return pattern.sub(replace, text)


def _redact(text: str) -> tuple[str, list[tuple[str, str]]]:
    """Return the masked text and the (kind, match) pairs, rules applied in order."""
    found: list[tuple[str, str]] = []
    for rule in _RULES:
        text = _apply(text, rule, found)
    return text, found


def redact_pii(text: str) -> tuple[str, int]:
    """Return text with personal data masked and the number of redactions."""
    redacted, found = _redact(text)
    return redacted, len(found)


def find_pii(text: str) -> list[tuple[str, str]]:
    """Return the (kind, match) pairs redact_pii would mask, in rule order."""
    return _redact(text)[1]
