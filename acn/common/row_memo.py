"""What is worked out from one stored row, kept on the object the row was read into, for as long as it lives.

The in-process index (acn/storage/database/lite/local_index.py) serves a session's rows as the same Memory objects
turn after turn, so a row's check, its rendered line and its terms need working out once per object, not once per
call. Kept in process-wide caches instead (bounded by entries or bytes), they were pushed out by other sessions'
rows: with 32 chats at once each turn segmented and checked its candidates again (issue 47).

The values live in the object's own `__dict__`, under a name no field has (MEMO): they go with the object, no other
session's rows can push them out, and a lookup reads the object just read, not a process-wide table. Kept instead in
tables keyed by the object's id, with a weak reference per object to drop them, a lookup cost three reads of large
tables (a cache miss each: ~0.9 ms of dictionary lookups an assemble at turn 3,000 of bench.long_session's chat,
cProfile) and every entry was two objects more for each full collection to visit. A pydantic model's equality,
dumps and copies read its fields only (tests/test_row_memo.py), so two equal memories stay equal whatever was worked
out from one of them. A copy (`model_copy`, `copy.copy`) shares its original's `__dict__` entries: the values name
their owner, and a copy starts its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

# The `__dict__` key of the values kept for an object (a leading underscore: never a pydantic field name).
MEMO = "_acn_row_memo"


class Memo(dict[str, tuple[Any, Any]]):
    """The values kept for one object ({name: (key, value)}), and the id of that object."""

    __slots__ = ("owner",)

    def __init__(self, owner: int) -> None:
        super().__init__()
        self.owner = owner


def memo_slots(obj: Any) -> Memo:
    """Return the values kept for this object (empty the first time, and for a copy of an object that had some)."""
    fields = obj.__dict__
    memo: Memo | None = fields.get(MEMO)
    if memo is None or memo.owner != id(obj):
        memo = fields[MEMO] = Memo(id(obj))
    return memo


def remembered(obj: Any, name: str, key: Any, same: Callable[[Any, Any], bool], compute: Callable[[], T]) -> T:
    """Return the value kept under name for obj when same(kept key, key), else compute it and keep it.

    Every read compares the key, which holds what the value was worked out from: a field changed in place, or
    values a copy still shares with its original, are worked out again, never served stale."""
    slots = memo_slots(obj)
    kept = slots.get(name)
    if kept is not None and same(kept[0], key):
        return kept[1]  # type: ignore[no-any-return]
    value = compute()
    slots[name] = (key, value)
    return value


def kept_names(obj: Any) -> list[str]:
    """Return the names of the values kept for this object (for tests)."""
    memo: Memo | None = obj.__dict__.get(MEMO)
    return sorted(memo) if memo is not None and memo.owner == id(obj) else []
