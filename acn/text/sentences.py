"""Sentence splitting for Chinese and English text."""

from __future__ import annotations

import re

_CLOSERS = "”’\"')）】」』》"
# A Chinese terminator (or !?;) ends a sentence wherever it stands; closing quotes stay with it.
# "!=" is an operator, not an exclamation.
_HARD_END = re.compile(rf"(?:[。！？；]|[!?;](?!=))+[{_CLOSERS}]*")
# An English full stop ends a sentence only when whitespace or the end follows, which
# already spares decimals (3.5), versions (v2.1.0), domains and e-mail addresses.
_SOFT_END = re.compile(rf"\.+[{_CLOSERS}]*(?=\s|$)")
_NEWLINES = re.compile(r"\n+")
# URLs may hold "?" and ";" and end right before Chinese text, so they are found first and skipped.
_URL = re.compile(r"(?:https?|ftp)://[^\s\u3000-\u303f\u4e00-\u9fff\uff00-\uffef<>\"]+", re.IGNORECASE)
_ABBREVIATIONS = frozenset(
    {
        "e.g",
        "i.e",
        "etc",
        "vs",
        "mr",
        "mrs",
        "ms",
        "dr",
        "prof",
        "sr",
        "jr",
        "st",
        "no",
        "fig",
        "approx",
        "dept",
        "inc",
        "ltd",
        "co",
        "corp",
        "jan",
        "feb",
        "mar",
        "apr",
        "jun",
        "jul",
        "aug",
        "sep",
        "sept",
        "oct",
        "nov",
        "dec",
        "u.s",
        "a.m",
        "p.m",
        "cf",
        "al",
        "est",
        "ca",
        "vol",
        "ed",
        "eq",
    }
)
_WORD_BEFORE = re.compile(r"([A-Za-z](?:[A-Za-z.]*[A-Za-z])?)$")
_DOTTED = re.compile(r"(?:[a-z]\.)+[a-z]")
_LIST_MARKER = re.compile(r"^\s*(?:\d{1,3}|[A-Za-z])$")
_LIST_MARKER_AT = re.compile(r"\s*(?:\d{1,3}|[A-Za-z])$")  # _LIST_MARKER for match(text, pos, endpos)
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz.")


def split_sentences(text: str) -> list[str]:
    """Return the sentences of text, stripped, in order, with no empty items."""
    if not text:
        return []
    protected = [match.span() for match in _URL.finditer(text)]
    cuts = sorted(set(_hard_cuts(text, protected)) | set(_soft_cuts(text, protected)))
    pieces, start = [], 0
    for cut in cuts:
        pieces.append(text[start:cut])
        start = cut
    pieces.append(text[start:])
    return [piece.strip() for piece in pieces if piece.strip()]


def _inside(position: int, spans: list[tuple[int, int]]) -> bool:
    """Return True when position falls inside one of spans (end excluded)."""
    return any(start <= position < end for start, end in spans)


def _hard_cuts(text: str, protected: list[tuple[int, int]]) -> list[int]:
    """Return cut positions after CJK/!?; terminators and at newlines."""
    cuts = [m.end() for m in _HARD_END.finditer(text) if not _inside(m.start(), protected)]
    return cuts + [m.end() for m in _NEWLINES.finditer(text)]


def _soft_cuts(text: str, protected: list[tuple[int, int]]) -> list[int]:
    """Return cut positions after English full stops that really end a sentence."""
    cuts = []
    for match in _SOFT_END.finditer(text):
        if _inside(match.start(), protected) or _is_abbreviation(text, match.start()):
            continue
        cuts.append(match.end())
    return cuts


def _is_abbreviation(text: str, dot: int) -> bool:
    """Return True when the full stop at dot closes an abbreviation or a list marker."""
    # Read in place, not in a copy of text[:dot], and search for the word only in the letters-and-dots run that
    # ends at the dot (where any match of _WORD_BEFORE lies): per full stop, a long text cost its whole length.
    line_start = max(text.rfind("\n", 0, dot), text.rfind("。", 0, dot)) + 1
    if _LIST_MARKER_AT.match(text, line_start, dot):
        return True
    run = dot - 1 if dot and text[dot - 1] == "\n" else dot  # "$" also matches before a final newline
    while run > 0 and text[run - 1] in _WORD_CHARS:
        run -= 1
    word = _WORD_BEFORE.search(text[run:dot])
    if word is None:
        return False
    token = word.group(1).lower()
    # Single capital letters are initials ("J. Smith"); dotted forms are e.g./i.e./U.S.
    return (
        token in _ABBREVIATIONS
        or (len(token) == 1 and word.group(1).isupper())
        or bool(_DOTTED.fullmatch(token))
    )
