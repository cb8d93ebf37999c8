"""What is worked out from one stored row, kept with the object the row was read into, for as long as it lives.

The in-process index (acn/storage/database/lite/local_index.py) serves a session's rows as the same Memory objects
turn after turn, so a row's check, its rendered line and its terms need working out once per object, not once per
call. Kept in process-wide caches instead (bounded by entries or bytes), they were pushed out by other sessions'
rows: with 32 chats at once each turn segmented and checked its candidates again (issue 47). Here an entry lives
exactly as long as its object (a weak reference drops it), so no other session's rows can push it out, and its size
follows the rows the index holds.

A pydantic model compares its private attributes, so the values are not kept on the object itself: two equal
memories must stay equal whatever was worked out from one of them.

Every object kept here is scanned by the cyclic collector's full passes (a pause of every request: 0.89 s at 887k
tracked objects, 32 chats of 250 turns; docs/benchmarks.md): an entry is a weak reference and a dict of values in
two tables, and every reference shares one callback. A (reference, values) tuple and a callback closure per entry
were three objects more per memoised row for each pass to visit.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# id(object) -> a weak reference to it, and -> the values kept for it ({name: (key, value)})
_REFERENCES: dict[int, weakref.ref[Any]] = {}
_SLOTS: dict[int, dict[str, tuple[Any, Any]]] = {}
# id(weak reference) -> id(its object): the one callback finds an entry by the reference it is called with
_OWNERS: dict[int, int] = {}


def memo_slots(obj: object) -> dict[str, tuple[Any, Any]]:
    """Return the values kept for this object (an empty dict the first time)."""
    number = id(obj)
    reference = _REFERENCES.get(number)
    if reference is not None and reference() is obj:
        slots = _SLOTS.get(number)
        if slots is not None:
            return slots
    if reference is not None:  # an older object's entry at the same address whose callback has not run
        _OWNERS.pop(id(reference), None)
    slots = {}
    reference = weakref.ref(obj, _drop)
    _OWNERS[id(reference)] = number
    _SLOTS[number] = slots
    _REFERENCES[number] = reference
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
    return len(_SLOTS)


def _drop(reference: weakref.ref[Any]) -> None:
    """Forget the entry of the object a reference pointed to (its callback, as the object goes)."""
    number = _OWNERS.pop(id(reference), None)
    if number is not None and _REFERENCES.get(number) is reference:  # not a newer object's entry at that address
        _REFERENCES.pop(number, None)
        _SLOTS.pop(number, None)
