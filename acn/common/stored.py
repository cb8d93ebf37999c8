"""What a stored memory row's fields may hold: one check for the way in (an import) and the way out (every read).

The store takes any int64, but the code does arithmetic on these fields after reading them back: the session
clock adds 1 to the newest stamp (2^63 − 1 + 1 no longer fits the store: every later write of that session
failed), the inspector turns a stamp into a date (year 292,278,994 is no date), a supersede adds 1 to a version.
So the bounds are what that arithmetic can hold with room to spare, not what the column can hold: an import
refuses a row outside them (422 naming the row and the field), and a row stored outside them anyway (written
before this check, or by other means) is skipped by the readers that would do the arithmetic, and reported.
"""

from __future__ import annotations

import operator
import time
from typing import Any

from acn.common.models import MAX_TURN, Memory, check_json_value
from acn.common.row_memo import remembered

# 365.25 days: a year on average, leap days included.
YEAR_MS = 31_557_600_000
# Timestamps within ±100 years of now: any real stamp (the oldest export, a clock set a little wrong), and far
# from datetime's year 9999 and from int64's end, whatever is added to them.
STAMP_WINDOW_MS = 100 * YEAR_MS
# Versions count the edits of one key: 2^31 − 1 is two billion edits, and version + 1 fits every integer type a
# client may read it into (a JavaScript number, a 32-bit int).
MAX_STORED_VERSION = 2**31 - 1
# Ids and history entries a row lists: as many as an import may carry (a memory merged from 10,000 turns).
MAX_STORED_LIST = 10_000


def stamp_bounds(now_ms: int | None = None) -> tuple[int, int]:
    """Return the lowest and highest timestamp (epoch ms) a stored row may hold now."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return now - STAMP_WINDOW_MS, now + STAMP_WINDOW_MS


def stamp_problem(value: int, now_ms: int | None = None) -> str | None:
    """Return why a timestamp cannot be used, or None."""
    low, high = stamp_bounds(now_ms)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        return "must be a UTC epoch-millisecond time within 100 years of now"
    return None


def memory_problems(memory: Memory, now_ms: int | None = None) -> list[tuple[str, str]]:
    """Return (field, why) for every field of a stored memory outside the bounds above ([] when it is usable)."""
    problems: list[tuple[str, str]] = []
    stamps: dict[str, Any] = {"created_at": memory.created_at, "updated_at": memory.updated_at}
    if memory.valid_to:
        stamps["valid_to"] = memory.valid_to
    for field, value in stamps.items():
        why = stamp_problem(value, now_ms)
        if why:
            problems.append((field, why))
    if not 1 <= memory.version <= MAX_STORED_VERSION:
        problems.append(("version", f"must be between 1 and {MAX_STORED_VERSION}"))
    if memory.turn_range is not None and not all(-1 <= turn <= MAX_TURN for turn in memory.turn_range):
        problems.append(("turn_range", f"turn numbers must be between 0 and {MAX_TURN}"))
    for field, items in (("source_ids", memory.source_ids), ("history", memory.history)):
        if items is not None and len(items) > MAX_STORED_LIST:
            problems.append((field, f"at most {MAX_STORED_LIST} entries"))
    for field, value in (("meta", memory.meta), ("history", memory.history)):
        try:
            check_json_value(value)
        except ValueError as error:
            problems.append((field, str(error)))
    return problems


def memory_problem(memory: Memory, now_ms: int | None = None) -> str | None:
    """Return the first problem of a stored memory as "field: why", or None when every field is usable.

    Remembered for the object with the values it read (compared as one tuple, which tests its items by identity
    before equality: the same containers cost no walk, and a changed one is checked again), so a row the
    in-process index serves turn after turn is checked when it is first read, not on every call (issue 47: an
    assemble at turn 600 spent 14 % of its time here). Kept with the object (acn/common/row_memo.py), so other
    sessions' rows never push it out.
    """
    if now_ms is not None:
        return first_problem(memory, now_ms)
    return remembered(memory, "problem", checked_fields(memory), operator.eq, lambda: first_problem(memory, None))


def checked_fields(memory: Memory) -> tuple[Any, ...]:
    """Return the fields memory_problems reads (what a remembered check is kept by)."""
    return (memory.created_at, memory.updated_at, memory.valid_to, memory.version, memory.turn_range,
            memory.source_ids, memory.meta, memory.history)


def first_problem(memory: Memory, now_ms: int | None = None) -> str | None:
    """Return the first problem of a stored memory as "field: why" (worked out now: see memory_problem)."""
    problems = memory_problems(memory, now_ms)
    return f"{problems[0][0]} {problems[0][1]}" if problems else None
