"""The memory layer's fill, BM25 only: what takes a focused context's budget left over once every layer is fitted.

Without dense vectors the ranked hits are the lexical matches alone, and a context whose recent turns are few (a
session compacted into its archive) was left part empty: zh-daily dev at 1k / 2k / 4k used 873 / 1,879 / 3,509
tokens on average, while BM25 over raw messages fills its budget with further matches and then with messages that
match nothing. The fill is the matches under the score floor (best first), then the archived messages just older
than the recent turns (newest first). It only takes what is left after every layer is fitted (assemble.fit_layers),
so it never takes the place of a hit, a recent turn or the working state. Issue 28, dev splits of bench.recall, BM25
only: zh-daily 4k 90.2 -> 90.5, MADial zh 1k 57.4 -> 57.7, the other cells of those suites and MADial en unchanged.

A long session's context is full: what is left is a few tokens, less than any line costs. The fill is made when a
fit first asks for it, and its lines only when the room left could hold the cheapest of them (issue 47: making the
fill's ~100 lines on every call was ~15 % of a focused assemble at turn 1,100 of a number-rich chat).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property

from acn.assembly.current import current_memories
from acn.assembly.fit import Fitted, Item
from acn.assembly.layers import memory_items
from acn.assembly.recall import message_order, readable
from acn.common.models import Memory, Message, Namespace
from acn.memory.lines import folded_content, memory_line_cost
from acn.services.deps import Deps
from acn.text.tokens import Tokenizer


def fill_memories(namespace: Namespace, deps: Deps, history: list[Message], below: list[Memory],
                  count: int) -> list[Memory]:
    """Return the fill's candidates: the matches under the score floor (best first), then up to `count` archived
    messages just older than the recent turns (newest first); only readable rows."""
    turns = [m.turn for m in history if m.turn is not None]
    older: list[Memory] = []
    if turns and count > 0:
        first = min(turns)
        wanted = list(range(max(0, first - count), first))
        older = sorted(readable(deps.memories.archived_messages(deps.tenant, namespace, wanted)), key=message_order,
                       reverse=True)
    return [*readable(below), *older]


class Fill:
    """One call's fill: its memories the first time they are asked for, its lines once one could fit."""

    def __init__(self, spare: Callable[[], list[Memory]], served: list[Memory], stale: set[str], shown: set[int],
                 language: str, tokenizer: Tokenizer) -> None:
        self._spare = spare  # fill_memories for this call, or nothing (another mode, dense vectors)
        self._served = served
        self._stale = stale
        self._shown = shown
        self._language = language
        self._tokenizer = tokenizer

    @cached_property
    def memories(self) -> list[Memory]:
        """The spare candidates that are not served already (nor a message the history shows, nor superseded)."""
        known = {m.id for m in self._served}
        extra = [m for m in self._spare() if m.id not in known and not (m.kind == "turn" and m.turn_range
                                                                         and m.turn_range[0] in self._shown)]
        current, _ = current_memories(extra, self._stale)  # every spare one is readable (fill_memories)
        return current

    @cached_property
    def has_lines(self) -> bool:
        """Whether the fill makes a line: memory_items keeps the first memory whose text no served one holds."""
        said = {folded_content(m) for m in self._served}
        return any(folded_content(m) not in said for m in self.memories)

    @cached_property
    def items(self) -> list[Item]:
        """The fill's items, ranked after the served ones, so a text they already show is not repeated; the
        served ones' lines are not made again (they were: a second rendering of ~100 lines a call, issue 47)."""
        known = {m.id for m in self._served}
        return [item for item in memory_items(self.memories, self._language, self._tokenizer, shown=self._served)
                if item.key not in known]

    @cached_property
    def cheapest(self) -> int:
        """At most what the fill's cheapest line costs: every item's one variant is its memory's line (memory_items),
        counted with its newline as the fit counts it; a group header only adds to that."""
        return min((memory_line_cost(m, self._language, self._tokenizer) for m in self.memories), default=0)

    def fitted(self, items: list[Item], budget: int, fit: Callable[[list[Item], int], Fitted],
               keep: Callable[[Item], bool] = lambda item: True) -> Fitted:
        """Return fit(items + the fill's items that `keep` takes, budget), without making the fill's lines when none
        could be kept.

        The fit is greedy in list order and the fill's items come last: each is kept only where its cost is at
        most the budget less what the items before it used. When that room, after `items` alone, is less than the
        cheapest line, the fit of `items` alone keeps, drops and counts exactly what the whole fit would.
        """
        alone = fit(items, budget)
        if not self.has_lines or budget - alone.used < self.cheapest:
            return alone
        return fit([*items, *(item for item in self.items if keep(item))], budget)
