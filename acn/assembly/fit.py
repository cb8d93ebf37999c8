"""Fit candidate items into a layer's token budget, exactly, by the configured tokenizer."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from acn.common.models import Message
from acn.text.tokens import MESSAGE_OVERHEAD_TOKENS, Tokenizer

# A cut segment shorter than this says too little to be worth its header.
MIN_CUT_TOKENS = 48
# A later day header's short form (`[2024-08-31]`), and a header's year (acn/memory/lines.py short_header).
_SHORT_DATE = re.compile(r"\[(\d{4})-(\d{2}-\d{2}[^\]]*)\]")
_YEAR = re.compile(r"(?<!\d)(\d{4})-\d{2}-\d{2}")


@dataclass
class Item:
    """One candidate line (or turn) of a layer.

    `variants` are the texts to try, richest first (a segment in full, then brief); `order` decides
    where a chosen item is shown; the list position of an item is its priority. Items of the same `group`
    shown one after another share one header line (the group) instead of each repeating it; a group header
    after the layer's first one is written as `short_group` when the item has one (see layer_lines).
    """

    key: str
    variants: list[str]
    order: tuple[Any, ...]
    source: dict[str, Any] | None = None
    messages: list[Message] = field(default_factory=list)
    chosen: str = ""
    group: str = ""
    short_group: str = ""
    text: str = ""  # a memory's content (without its tag): what a recent turn may already show
    costs: list[int] | None = None  # each variant's tokens plus its newline, counted by the first fit
    cut: bool = False  # when no variant fits, the last one cut to the room left (a segment), not dropped whole


def variant_costs(item: Item, tokenizer: Tokenizer) -> list[int]:
    """Return what each variant of the item costs as a line; a layer is fitted up to three times per call
    (its share, then spare budget twice), so the counts are taken once."""
    if item.costs is None:
        item.costs = [tokenizer.count(variant) + 1 for variant in item.variants]
    return item.costs


@dataclass
class Fitted:
    """What a layer kept and what it had to drop."""

    items: list[Item]
    dropped: list[tuple[Item, int]]
    tokens: int
    used: int = 0  # a text layer's running bound once every candidate was tried (fit_text_items; the fill reads it)


def text_layer_cost(texts: list[str], tokenizer: Tokenizer) -> int:
    """Return what a layer rendered as one system message costs (0 when empty)."""
    if not texts:
        return 0
    return MESSAGE_OVERHEAD_TOKENS + tokenizer.count("\n".join(texts))


def layer_lines(items: list[Item]) -> list[str]:
    """Return the chosen lines in order, each group's header written once before a run of its items.

    The layer's first header is written in full (`[来自记忆 · 2024-08-28]`); a later one in its short form
    when it has one (`[2024-08-31]`): the first already says where the block comes from. A later date in the
    year of the header before it is written without the year (`[08-31]`).
    """
    lines: list[str] = []
    previous, headed, year = "", False, ""
    for item in items:
        if item.group and item.group != previous:
            lines.append(header_line(item, headed, year))
            headed, year = True, header_year(lines[-1]) or year
        previous = item.group
        lines.append(item.chosen)
    return lines


def header_line(item: Item, headed: bool, year: str | None = None) -> str:
    """Return the item's group header: in full for the layer's first header, else its short form if any, and
    without its year when that is `year` (the header before it said it).

    `year` None (the fit's estimate, which cannot know the header before) drops the year alike: the year is
    written again only where it changes, and the fit's exact count takes that back (see fit_text_items).
    """
    if not (headed and item.short_group):
        return item.group
    dated = _SHORT_DATE.fullmatch(item.short_group)
    if dated and year in (None, dated.group(1)):
        return f"[{dated.group(2)}]"
    return item.short_group


def header_year(header: str) -> str | None:
    """Return the year a header's date says (`[来自记忆 · 2024-08-28]`, `[2024-08-31]`), or None."""
    found = _YEAR.search(header)
    return found.group(1) if found else None


def fit_text_items(candidates: list[Item], budget: int, tokenizer: Tokenizer) -> Fitted:
    """Greedily keep items in priority order, each in its richest variant that still fits.

    The first item kept of a group also pays for the group's header line (the first group opened pays for the
    full header, later ones for their short form: layer_lines writes one full header, the layer's first).
    """
    kept: list[Item] = []
    dropped: list[tuple[Item, int]] = []
    opened: set[str] = set()
    # Joining lines never costs more than the lines plus one token per newline, so the running sum
    # is a safe upper bound; the exact count is taken once at the end.
    used = MESSAGE_OVERHEAD_TOKENS
    for item in candidates:
        header = tokenizer.count(header_line(item, bool(opened))) + 1 \
            if item.group and item.group not in opened else 0
        costs = variant_costs(item, tokenizer)
        room = budget - used - header
        # Most candidates of a full layer fit in no variant: tell that without a generator per item (a layer is
        # fitted several times a call, ~250 candidates each time at turn 300 of a long chat).
        chosen = None if not costs or min(costs) > room else next(i for i, cost in enumerate(costs) if cost <= room)
        if chosen is None and item.cut and costs and room - 1 >= MIN_CUT_TOKENS:
            text = tokenizer.truncate(item.variants[-1], room - 1)
            item.chosen = text
            kept.append(item)
            if item.group:
                opened.add(item.group)
            used += tokenizer.count(text) + 1 + header
            continue
        if chosen is None:
            dropped.append((item, costs[-1] + header if costs else 0))
            continue
        item.chosen = item.variants[chosen]
        kept.append(item)
        if item.group:
            opened.add(item.group)
        used += costs[chosen] + header
    kept.sort(key=lambda k: k.order)
    exact = text_layer_cost(layer_lines(kept), tokenizer)
    # The bound holds unless a group's items are not shown one after another (its header then repeats);
    # dropping the lowest-priority items keeps the guarantee.
    while kept and exact > budget:
        last = max(kept, key=candidates.index)
        kept.remove(last)
        dropped.append((last, tokenizer.count(last.chosen)))
        exact = text_layer_cost(layer_lines(kept), tokenizer)
    return Fitted(kept, dropped, exact, used)


def fit_message_items(candidates: list[Item], budget: int, tokenizer: Tokenizer) -> Fitted:
    """Keep whole items (turns) in priority order while their messages fit; a turn is never split."""
    kept: list[Item] = []
    dropped: list[tuple[Item, int]] = []
    used = 0
    for item in candidates:
        cost = sum(tokenizer.count_message(m) for m in item.messages)
        if used + cost <= budget:
            kept.append(item)
            used += cost
        else:
            dropped.append((item, cost))
    kept.sort(key=lambda k: k.order)
    return Fitted(kept, dropped, used)


def surely_kept(candidates: list[Item], budget: int, tokenizer: Tokenizer) -> list[Item]:
    """Return the leading items (turns, newest first) whose messages fit in `budget` together.

    fit_message_items skips a turn too big for the room and goes on, so with more room a turn kept before can
    be pushed out by a bigger, newer one; these leading items stay whatever room above `budget` the layer gets.
    """
    kept, used = [], 0
    for item in candidates:
        used += sum(tokenizer.count_message(m) for m in item.messages)
        if used > budget:
            break
        kept.append(item)
    return kept
