"""Language detection good enough to pick zh or en labels."""

from __future__ import annotations

import re
from typing import Literal

Language = Literal["zh", "en"]

_CJK = re.compile(r"[\u4e00-\u9fff\u3400-\u4dbf]")
_LATIN_WORD = re.compile(r"[A-Za-z]{2,}")


def detect_language(text: str) -> Language:
    """Return "zh" when the text has Chinese characters in any real share, else "en"."""
    cjk = len(_CJK.findall(text))
    if cjk == 0:
        return "en"
    words = len(_LATIN_WORD.findall(text))
    return "zh" if cjk >= words else "en"


def has_cjk(text: str) -> bool:
    """Return True when text contains a CJK ideograph."""
    return _CJK.search(text) is not None
