"""Date normalisation for source tags: "1:56 pm on 8 May, 2023", "May 8, 2023", "2023年5月8日" → 2023-05-08."""

from __future__ import annotations

import re

_MONTHS = {name: index for index, names in enumerate(
    [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"), ("may",), ("jun", "june"),
     ("jul", "july"), ("aug", "august"), ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"),
     ("dec", "december")], start=1) for name in names}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_PATTERNS = [
    re.compile(r"(?P<year>\d{4})[-/.](?P<m>\d{1,2})[-/.](?P<day>\d{1,2})"),
    re.compile(r"(?P<year>\d{4})\s*年\s*(?P<m>\d{1,2})\s*月\s*(?P<day>\d{1,2})\s*[日号]"),
    re.compile(rf"\b(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s+{_MONTH}\s*,?\s*(?P<year>\d{{4}})\b", re.IGNORECASE),
    re.compile(rf"\b{_MONTH}\s+(?P<day>\d{{1,2}})(?:st|nd|rd|th)?\s*,?\s*(?P<year>\d{{4}})\b", re.IGNORECASE),
]
MAX_RAW_CHARS = 40


def normalise_date(text: str) -> str:
    """Return the first date in text as YYYY-MM-DD, or the text itself (trimmed) when none is recognised."""
    for pattern in _PATTERNS:
        match = pattern.search(text)
        if not match:
            continue
        groups = match.groupdict()
        month = int(groups["m"]) if groups.get("m") else _MONTHS[groups["month"].lower()]
        day, year = int(groups["day"]), int(groups["year"])
        if 1 <= month <= 12 and 1 <= day <= 31:
            return f"{year:04d}-{month:02d}-{day:02d}"
    return text.strip()[:MAX_RAW_CHARS]
