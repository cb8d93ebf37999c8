"""What is worked out from one stored row, kept with the object the row was read into, for as long as it lives.

The in-process index (acn/storage/lite/local_index.py) serves a session's rows as the same Memory objects turn after
turn, so a row's check, its rendered line and its terms need working out once per object, not once per call. Kept
in process-wide caches instead (bounded by entries or bytes), they were pushed out by other sessions' rows: with 32
chats at once each turn segmented and checked its candidates again (issue 47). Here an entry lives exactly as long
as its object (a weak reference drops it), so no other session's rows can push it out, and its size follows the
rows the index holds.

A pydantic model compares its private attributes, so the values are not kept on the object itself: two equal
memories must stay equal whatever was worked out from one of them.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# id(object) -> (a weak reference to it, {name: (key, value)})
_MEMOS: dict[int, tuple[weakref.ref[Any], dict[str, tuple[Any, Any]]]] = {}


def memo_slots(obj: object) -> dict[str, tuple[Any, Any]]:
    """Return the values kept for this object (an empty dict the first time)."""
    number = id(obj)
    entry = _MEMOS.get(number)
    if entry is not None and entry[0]() is obj:
        return entry[1]
    slots: dict[str, tuple[Any, Any]] = {}
    _MEMOS[number] = (weakref.ref(obj, _dropper(number)), slots)
    return slots


def remembered(obj: object, name: str, key: Any, same: Callable[[Any, Any], bool],
               compute: Callable[[], T]) -> T:
    """Return the value kept under name for obj when same(kept key, key), else compute it and keep it."""
    slots = memo_slots(obj)
    kept = slots.get(name)
    if kept is not None and same(kept[0], key):
        return kept[1]  # type: ignore[no-any-return]
    value = compute()
    slots[name] = (key, value)
    return value


def held() -> int:
    """How many objects have values kept (for tests: an object's entry leaves with it)."""
    return len(_MEMOS)


def _dropper(number: int) -> Callable[[weakref.ref[Any]], None]:
    def drop(reference: weakref.ref[Any]) -> None:
        entry = _MEMOS.get(number)
        if entry is not None and entry[0] is reference:  # not a newer object's entry at the same address
            _MEMOS.pop(number, None)
    return drop
