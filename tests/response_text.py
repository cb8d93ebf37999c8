"""The text a response carries, without the ids and hashes beside it: what "is this value absent?" must read.

A random id (mem_<32 hex>, a request_id) holds any given 4-digit string about once in 2,000 draws, so asserting
that "9911" is absent from a whole response failed about one run in a hundred (issue 35). Every string and number
of the response is read here except under id fields, which are random by design and never carry a caller's text.
"""

from __future__ import annotations

from typing import Any

ID_KEYS = frozenset({"id", "request_id", "archived_ids", "source_ids", "superseded_by"})


def is_id_key(key: str) -> bool:
    return key in ID_KEYS or key.endswith(("_id", "_ids"))


def carried_text(value: Any) -> str:
    """Return every string, number and key in value (a parsed JSON response), one a line, ids left out."""
    lines: list[str] = []
    _walk(value, lines)
    return "\n".join(lines)


def _walk(value: Any, lines: list[str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if not is_id_key(str(key)):
                lines.append(str(key))
                _walk(item, lines)
    elif isinstance(value, list):
        for item in value:
            _walk(item, lines)
    elif value is not None:
        lines.append(str(value))
