"""The current view of stored state: what a later value superseded is kept in storage, not served.

Compaction keeps every number (an earlier "超时 30秒" stays in key_numbers as "超时（此前）"), and
archived raw turns keep everything verbatim. A context, though, must not serve a superseded value
without the current one, so assembly filters them out here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from functools import lru_cache

from acn.common.models import Memory, Namespace, Segment
from acn.compaction.key_numbers import EARLIER_SUFFIX
from acn.compaction.segment_lines import render_segment
from acn.compaction.state import working_state
from acn.storage.repositories import MemoryRepository
from acn.text.numbers import extract_key_numbers, value_haystack, value_needle, value_present

_EARLIER = tuple(EARLIER_SUFFIX.values())


def stale_values(memories: MemoryRepository, tenant: str, namespace: Namespace) -> set[str]:
    """Return values that superseded memories stated and their successors no longer do."""
    # Only a supersede, an update or a delete changes this: the repository remembers it until one happens.
    key = ("stale_values", memories.queries.superseded_key(tenant, namespace))
    return memories.kept.view(key, lambda: _stale_values(memories, tenant, namespace))


def _stale_values(memories: MemoryRepository, tenant: str, namespace: Namespace) -> set[str]:
    old = memories.queries.superseded_in(tenant, namespace, limit=500)
    if not old:
        return set()
    successors = {m.superseded_by for m in old if m.superseded_by}
    live = {m.id: m for m in memories.queries.within_by_ids(tenant, namespace, sorted(successors), limit=500)}
    stale: set[str] = set()
    for memory in old:
        successor = live.get(memory.superseded_by or "")
        current_text = successor.content if successor else ""
        stale |= {n.value for n in extract_key_numbers(memory.content) if not value_present(n.value, current_text)}
    return stale


def mentions_stale(text: str, stale: set[str] | frozenset[str]) -> bool:
    """Return True when text states a superseded value."""
    return bool(stale) and _mentions_any(text, frozenset(stale))


# Each assemble asks this of every candidate memory, and a session's candidates and superseded values
# change little from turn to turn.
@lru_cache(maxsize=16384)
def _mentions_any(text: str, stale: frozenset[str]) -> bool:
    # A user who changed their phone 300 times has 300 stale values, and a new conversation's first assemble asks
    # of every candidate: only a value whose needle is in the text can be present (value_needle), so the costly
    # check runs for those alone, not for each value against each candidate (issue 48).
    haystack = value_haystack(text)
    return any(needle in haystack and value_present(value, text) for value, needle in _needles(stale))


@lru_cache(maxsize=256)
def _needles(stale: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return tuple((value, value_needle(value)) for value in stale)


def current_segment(segment: Segment, stale: set[str]) -> Segment:
    """Return the segment without earlier-labelled numbers and statements of superseded values."""
    def keep(text: str) -> bool:
        return not mentions_stale(text, stale)

    numbers = {label: value for label, value in segment.key_numbers.items()
               if not label.endswith(_EARLIER) and value not in stale}
    return segment.model_copy(update={
        "constraints": [c for c in segment.constraints if keep(c)], "done": [d for d in segment.done if keep(d)],
        "todo": [t for t in segment.todo if keep(t)], "facts": [f for f in segment.facts if keep(f)],
        "decisions": [d for d in segment.decisions if keep(d.decision)], "key_numbers": numbers,
    })


def current_segments(segments: list[Segment], stale: set[str], language: str) -> list[Segment]:
    """Return every segment in its current view, re-rendered (carried goal/constraints shown once).

    Every assemble asks again, and a session's segments change only when it compacts: once a session's history
    is over the trigger that is every turn, but only at its end (the newest segment grows or a new one is cut; the
    oldest changes when the roll-up trims it, about one turn in two). So each segment's view is remembered by what
    it is worked out from: its own id and text, those of the segments before it (their goal and constraints are
    what it inherits), the superseded values and the language (do not modify what is returned). Remembered by the
    whole list instead, the ~3,700-character rolled-up segment was rendered again on every turn of a long session
    (issue 47: 2.3 ms a turn in the profile of 32 chats at turns 201-250).
    """
    values = frozenset(stale)
    views: list[Segment] = []  # the current views (not rendered): what the later segments inherit
    rendered: list[Segment] = []
    prefix: tuple[Hashable, ...] = (values, language)
    for segment in segments:
        prefix = (prefix, segment.id, segment.text)
        with _VIEWS_LOCK:
            cached = _VIEWS.get(prefix)
            if cached is not None:
                _VIEWS.move_to_end(prefix)
        if cached is None:
            view = current_segment(segment, stale)
            inherited = working_state(views) if views else None
            cached = (view, view.model_copy(update={"text": render_segment(view, language, inherited)}))
            with _VIEWS_LOCK:
                _VIEWS[prefix] = cached
                while len(_VIEWS) > CACHED_SEGMENT_VIEWS:
                    _VIEWS.popitem(last=False)
        views.append(cached[0])
        rendered.append(cached[1])
    return rendered


# Segment views kept (each under the key of its segment and those before it): 32 sessions of 5 segments each,
# with the entries the segments they replaced left, fit many times over.
CACHED_SEGMENT_VIEWS = 1024
_VIEWS: OrderedDict[Hashable, tuple[Segment, Segment]] = OrderedDict()
_VIEWS_LOCK = threading.Lock()


def current_memories(found: list[Memory], stale: set[str]) -> tuple[list[Memory], list[Memory]]:
    """Split memories into (served, withheld): whatever states a superseded value is withheld."""
    served: list[Memory] = []
    withheld: list[Memory] = []
    values = frozenset(stale)
    for memory in found:
        (withheld if mentions_stale(memory.content, values) else served).append(memory)
    return served, withheld
