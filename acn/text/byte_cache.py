"""One least-recently-used cache, bounded by bytes, for the text functions that remember their results.

Retrieval, assembly and dedup fold, shingle and segment the same stored texts on every call, so acn/text/similarity.py
and acn/text/terms.py keep what they computed. Bounded by entries (functools.lru_cache), those caches held whatever
their texts weighed: 32,768 folded texts of up to 2,000 characters, 256 shingle sets of texts up to 100k characters
(megabytes each), outside every budget. Here they share one budget in bytes (ACN_TEXT_CACHE_MB, set by the runtime
at start-up), counted as sys.getsizeof of the key text, the value and the value's items (strings a value shares
with another entry are counted in each: the bound errs on the safe side). The least recently used entries leave
first, whichever function made them; a value larger than MAX_SHARE of the budget is returned but not kept.

Hits take no lock (a lookup and a move to the end are each atomic under the GIL; an entry evicted between the
two is simply not moved); inserts and evictions do. Results are the function's own, kept or not.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable
from functools import update_wrapper
from typing import Any, Protocol, TypeVar

DEFAULT_BYTES = 32 << 20  # ACN_TEXT_CACHE_MB's default, until the runtime sets the budget
# What an entry costs besides its key text and value: the (function, text) key tuple, the (value, bytes) pair and
# the ordered dict's slot and link (measured with tracemalloc: ~219 bytes).
ENTRY_BYTES = 220
# A string passed to sys.intern has a slot in the interpreter's interned table while it lives (~40 bytes with the
# table's spare room): counted for the character bigrams of acn/text/similarity.py, which are interned.
INTERNED_SLOT_BYTES = 40
# A value above this share of the budget would push out many others to be used maybe once: it is not kept.
MAX_SHARE = 1 / 16

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


def text_bytes(value: str) -> int:
    """Bytes a string holds."""
    return sys.getsizeof(value)


def items_bytes(value: Collection[str]) -> int:
    """Bytes a tuple or frozenset of strings holds, its strings included."""
    return sys.getsizeof(value) + sum(map(sys.getsizeof, value))


def interned_items_bytes(value: Collection[str]) -> int:
    """items_bytes, plus the interpreter's table of interned strings, which holds each of them while they live."""
    return items_bytes(value) + INTERNED_SLOT_BYTES * len(value)


class ByteLRU:
    """A cache of one-argument function results, least recently used out first once the bytes exceed the budget."""

    def __init__(self, max_bytes: int = DEFAULT_BYTES) -> None:
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._lock = threading.Lock()
        self._max_bytes = max_bytes
        self.bytes = 0  # what the entries held count (changed under the lock)

    @property
    def max_bytes(self) -> int:
        return self._max_bytes

    def resize(self, max_bytes: int) -> None:
        """Set the budget (ACN_TEXT_CACHE_MB); entries over it leave now."""
        with self._lock:
            self._max_bytes = max(0, max_bytes)
            self._evict()

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def cached(self, size: Callable[[Any], int]) -> Callable[[Callable[[str], T]], Cached[T]]:
        """Decorate a function of one string: its results are kept here, their bytes counted by size(result).

        A closure rather than an object with __call__: a hit costs about what functools.lru_cache's does
        (~0.3 µs: a dict lookup and a move to the end), and retrieval makes thousands of them a call.
        """

        def decorate(function: Callable[[str], T]) -> Cached[T]:
            get, move = self._entries.get, self._entries.move_to_end

            def cached_call(text: str) -> T:
                key = (function, text)
                entry = get(key)
                if entry is not None:
                    try:
                        move(key)
                    except KeyError:  # evicted by another thread since the lookup: the value in hand is right
                        return entry[0]  # type: ignore[no-any-return]
                    return entry[0]  # type: ignore[no-any-return]
                value = function(text)
                self._put(key, value, ENTRY_BYTES + sys.getsizeof(text) + size(value))
                return value

            def holds(text: str) -> bool:
                return (function, text) in self._entries

            update_wrapper(cached_call, function)
            cached_call.holds = holds  # type: ignore[attr-defined]
            return cached_call  # type: ignore[return-value]

        return decorate

    def _put(self, key: Hashable, value: Any, nbytes: int) -> None:
        if nbytes > self._max_bytes * MAX_SHARE:
            return
        with self._lock:
            previous = self._entries.pop(key, None)
            if previous is not None:  # another thread computed it too
                self.bytes -= previous[1]
            self._entries[key] = (value, nbytes)
            self.bytes += nbytes
            self._evict()

    def _evict(self) -> None:
        while self.bytes > self._max_bytes and self._entries:
            _, (_, nbytes) = self._entries.popitem(last=False)
            self.bytes -= nbytes


class Cached(Protocol[T_co]):
    """A function of one string whose results live in a ByteLRU."""

    def __call__(self, text: str) -> T_co: ...

    def holds(self, text: str) -> bool:
        """Whether the result for text is kept now."""


# The one cache of acn/text/similarity.py and acn/text/terms.py; the runtime sets its budget from ACN_TEXT_CACHE_MB.
TEXT_CACHE = ByteLRU()
