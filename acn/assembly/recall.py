"""Focused-mode recall: memories and archived raw turns for the input, expanded and deduplicated.

Retrieval (BM25, fused with dense vectors when an embedder is configured) finds the memories and the archived
messages that match the input. Then:
- an extracted fact that an archived message of the same turn already says in full points back to that
  message: the message (with its speaker and surroundings) is served instead of the fragment;
- the messages around the best hits (the question before an answer, the reply after a statement) join the
  candidates with a decayed score, so that when the budget allows, the context holds the exchange;
- a message of a day (a sitting) that holds several strong hits gains a share of that day's weight: what a
  question asks about is often talked over in one sitting, and its messages there outrank lone matches elsewhere;
- everything is ordered by score; the layer fitting then packs it into the budget.
"""

from __future__ import annotations

import logging
import operator
import re
from dataclasses import replace
from typing import get_args

from acn.assembly.earlier import Place, archived_at, dated, from_other, kept_earlier, place
from acn.assembly.hops import gathered
from acn.common.models import Memory, MemoryKind, Message, Namespace, meta_int, reserved_meta_error
from acn.common.row_memo import remembered
from acn.common.stored import checked_fields, first_problem
from acn.memory.lines import folded_content
from acn.retrieval.hybrid_rank import (
    MAX_POOL,
    MIN_POOL,
    MemoryRetrieveRequest,
    Ranked,
    committed,
    rank,
    retrieval_query,
)
from acn.retrieval.intent import wants_many
from acn.retrieval.learned_ranker import day_shares, reordered
from acn.services.deps import Deps
from acn.text.byte_cache import TEXT_CACHE, text_bytes
from acn.text.dates import normalise_date
from acn.text.pleasantries import is_pleasantry
from acn.text.query import resolve_back_reference

# How many archived messages focused mode considers when the request does not cap it: about as many as
# the budget could show (a message line is rarely under 25 tokens), within these bounds.
TOKENS_PER_MESSAGE = 25
MIN_TURN_POOL = 10
MAX_TURN_POOL = 150
# Candidates scoring below this share of the best one are not worth their tokens in a context of up to
# FLOOR_BUDGET tokens (see relative_floor).
RELATIVE_FLOOR = 0.4
FLOOR_BUDGET = 1000
# Messages next to the best hits, and how much of the hit's score they inherit. Two messages each way: what
# a question needs often sits in the same exchange a few lines from the line that matched its words (on LoCoMo
# conversations 1-2 a span of 2 gained 1.5-2.2 points of evidence recall over 1; a span of 3 nothing more).
NEIGHBOUR_HITS = 16
NEIGHBOUR_SPAN = 2
NEIGHBOUR_DECAY = 0.8
REPLY_DECAY = 0.95
# A question that counts or lists (retrieval.intent.wants_many) needs every message that holds one of its items;
# they share its meaning more than its words ("周末补了《沙丘2》" for "我最近都看了哪些电影？"), so the dense list
# counts more in the fusion. Issue 17, dev splits of bench.recall, with the gated salience and dialogue-only
# neighbours: 4 (vs rank.DENSE_WEIGHT 2) took zh-daily at 1k from 94.7 to 95.9 (list 69.8 -> 80.0), LoCoMo
# 80.0/86.6/92.4 -> 80.0/86.6/92.5, MADial zh +0.8 and en +0.8 at 1k; 3 and 6 were no better.
MANY_DENSE_WEIGHT = 4.0
# A neighbour outside an exchange (see with_neighbours) keeps this share of its decayed score: it comes after the
# direct hits, in a budget they leave unused. Issue 17, dev splits: 0.3 left the hybrid figures where excluding such
# neighbours put them (0.5 cost 0.4 on zh-daily at 1k) and, BM25 only (ACN_EMBEDDER=none), took zh-daily at
# 2k/4k from 86.5/88.1 (excluded) to 87.0/88.9 (before this change 87.2/89.5).
MONOLOGUE_DECAY = 0.3
# A message next to several hits (or a hit next to a better one) is more likely part of what the question is
# about than one next to a single hit: it keeps its best score plus this share of the next best. Issue 17, LoCoMo
# dev (0-4), with the day weight below: 0.2 -> +0.6 at 1k over max alone (0.1 and 0.3 no better).
NEIGHBOUR_SUM = 0.2
# The weight of a day (the date an archived message carries, e.g. a LoCoMo session): the sum of its DAY_HITS
# (retrieval/learned_ranker.py) best direct hits, over the best day's; each message of the day gains DAY_WEIGHT x
# that share of its score.
# Issue 17, LoCoMo dev at 1k/2k/4k, with NEIGHBOUR_SUM and same-day neighbours: 80.0/86.6/92.4 ->
# 81.6/87.1/92.7, multi-hop 45.7 -> 48.3 at 1k; DAY_HITS 1, 2 and 5 were worse than 3, weight 0.5 no better
# than 0.2. Its opposite (fewer hits per day, MMR-like: x0.9 per hit already taken from the day) lost 4 points.
DAY_WEIGHT = 0.2
_QUESTION = re.compile(r"[?？]|[吗呢么][。!！~～]*$")
log = logging.getLogger("acn.assembly")


def focused_memories(namespace: Namespace, query: str, deps: Deps, *, top_k: int, turn_pool: int,
                     history: list[Message], shown_turns: set[int] | None = None,
                     floor: float = RELATIVE_FLOOR, spill: list[Memory] | None = None) -> list[Memory]:
    """Return memories and archived messages for the query, best first, none under `floor` × the best score.

    `history` is the recent conversation (its last user message resolves a bare back-reference);
    `shown_turns` are the turns the history layer shows, whose messages are not served again; `spill`, when
    given, receives the candidates under the floor, best first (assemble's fill, BM25 only).
    """
    merged = focused_candidates(namespace, query, deps, top_k=top_k, turn_pool=turn_pool, history=history,
                                shown_turns=shown_turns)
    if wants_many(query):  # a count or a list: every weaker hit may hold one of its items; fill by score
        floor = 0.0
    def shown(memory: Memory) -> Memory:  # another conversation's message is headed by its day and names it
        return dated(memory) if from_other(namespace, memory) else memory

    if merged:  # a long tail of weak matches costs tokens and buries the answer
        cutoff = floor * merged[0].score
        if spill is not None:
            spill.extend(shown(r.memory) for r in merged if r.score < cutoff)
        merged = [r for r in merged if r.score >= cutoff]
    weighted = day_weighted(merged)
    # The learned ranker (docs/ranker.md) reorders what passed the floor; without its model, this order stays.
    weighted = reordered(query, weighted, [message_day(c.memory) for c in weighted],
                         enabled=deps.settings.ranker == "learned")
    return [shown(r.memory) for r in weighted]


def focused_candidates(namespace: Namespace, query: str, deps: Deps, *, top_k: int, turn_pool: int,
                       history: list[Message], shown_turns: set[int] | None = None) -> list[Ranked]:
    """Return every scored candidate for the query (facts, archived messages and their neighbours), best first."""
    if is_pleasantry(query):  # "好的" / "thanks" asks for nothing earlier: no recall, no tokens spent on it
        return []
    previous = next((m.content for m in reversed(history) if m.role == "user" and m.content), None)
    query = resolve_back_reference(query, previous)
    # One ranking over facts and archived messages together: BM25 normalisation and term weights are shared,
    # so a weakly matching fact does not outrank a message that answers the input.
    many = wants_many(query)
    def search(text: str, k: int, pool: int | None = None) -> list[Ranked]:
        return ranked(namespace, text, deps, kinds=list(get_args(MemoryKind)), top_k=k,
                      dense_weight=MANY_DENSE_WEIGHT if many else None, pool=pool)

    found = gathered(query, search, top_k + turn_pool)  # each question of the input, and a second hop
    events = [r for r in found if r.memory.kind != "turn"]
    # Without dense vectors a neighbour is the only way to a message that shares no word with the input: there
    # every neighbour keeps its score (BM25 alone, dev: zh-daily 2k/4k 87.0/88.9 at 0.3, 87.2/89.5 at 1).
    hybrid = any(r.parts.get("dense", 0.0) > 0 for r in found)
    turns = with_neighbours([r for r in found if r.memory.kind == "turn"][:turn_pool], namespace, deps,
                            monologue=MONOLOGUE_DECAY if hybrid else 1.0)
    # Messages still in the recent history are shown there; a fact must not point back to one of them.
    shown = shown_turns if shown_turns is not None else {m.turn for m in history if m.turn is not None}
    shown_places = {(namespace.session_id, turn) for turn in shown}
    turns = [t for t in turns if place(t.memory) not in shown_places]
    events, turns = point_back(events, with_holders(events, turns, namespace, deps, shown_places))
    events = events[:top_k]  # facts that are not a message's copy: the request's top_k of them
    return kept_earlier(namespace, query, sorted([*events, *turns], key=lambda r: (-r.score, -r.memory.updated_at)))


def day_weighted(candidates: list[Ranked]) -> list[Ranked]:
    """Return the candidates, best first, each archived message's score raised by the weight of its day (see
    DAY_WEIGHT).

    Only direct hits make a day's weight (a neighbour's score is its hit's, counted already); facts and messages
    without a date keep their score. Applied after the score floor, which judges a candidate's own relevance.
    """
    days = [message_day(c.memory) for c in candidates]
    shares = day_shares(candidates, days)  # the ranker reads the same weight as a feature
    if DAY_WEIGHT <= 0 or not any(shares):
        return candidates
    weighted = [replace(c, score=round(c.score * (1 + DAY_WEIGHT * share), 4)) if day is not None else c
                for c, day, share in zip(candidates, days, shares, strict=True)]
    return sorted(weighted, key=lambda r: (-r.score, -r.memory.updated_at))


def relative_floor(max_tokens: int) -> float:
    """Return the score floor (share of the best score) for a context of max_tokens.

    The floor keeps a small context from spending its tokens on weak matches; a larger budget has room for
    them, and the second fact a question needs often matches it only weakly. So the floor falls in proportion
    as the budget grows past FLOOR_BUDGET.
    """
    return RELATIVE_FLOOR * min(1.0, FLOOR_BUDGET / max_tokens)


def turn_pool(max_tokens: int) -> int:
    """Return how many archived messages to consider for a context of max_tokens."""
    return max(MIN_TURN_POOL, min(MAX_TURN_POOL, max_tokens // TOKENS_PER_MESSAGE))


def ranked(namespace: Namespace, query: str, deps: Deps, *, kinds: list[MemoryKind] | None,
           top_k: int, dense_weight: float | None = None, pool: int | None = None) -> list[Ranked]:
    """Return the top_k memories for the query, scored exactly as memory_retrieve does (`pool`: candidates each
    search leg takes, by default top_k within MIN_POOL..MAX_POOL)."""
    if top_k <= 0:  # nothing asked for (top_k and archive_top_k both 0): the retrieve model would refuse top_k=0
        return []
    request = MemoryRetrieveRequest(agent_id=namespace.agent_id, session_id=namespace.session_id,
                                    user_id=namespace.user_id, query=retrieval_query(query), kinds=kinds,
                                    top_k=min(top_k, 50))
    # Distinct: the layer shows a text once anyway, so copies (a question asked again, a repeated tool line)
    # would only take the pool's places from other candidates and their neighbours.
    pool = min(max(top_k, pool or MIN_POOL), MAX_POOL)
    # With a user, their earlier conversations' messages are candidates too, ranked with these (issue 48).
    return rank(request, deps, pool=pool, distinct=True, dense_weight=dense_weight, keep=top_k,
                earlier=bool(namespace.user_id))[:top_k]


def point_back(events: list[Ranked], turns: list[Ranked]) -> tuple[list[Ranked], list[Ranked]]:
    """Drop extracted facts that a retrieved message of their turn contains; that message inherits their score."""
    by_turn: dict[Place, list[int]] = {}
    for index, turn in enumerate(turns):
        at = place(turn.memory)
        if at is not None:
            by_turn.setdefault(at, []).append(index)
    kept = []
    for event in events:
        folded = folded_content(event.memory)
        at = place(event.memory)
        holder = next((i for i in (by_turn.get(at, []) if at is not None else [])
                       if folded and folded in folded_content(turns[i].memory)), None)
        if holder is None:
            kept.append(event)
        elif event.score > turns[holder].score:
            turns[holder] = replace(turns[holder], score=event.score)
    return kept, [t for t in turns if t.score > 0 or "holder" not in t.parts]


def with_holders(events: list[Ranked], turns: list[Ranked], namespace: Namespace, deps: Deps,
                 shown: set[Place]) -> list[Ranked]:
    """Return the turns plus, for each fact whose turn has no retrieved message, that turn's archived messages.

    A fact extracted word for word from a message is a copy of it: the store's distinct search keeps one copy
    of a text (the fact, written after its message), so the message itself is often missing from the list.
    point_back then serves the message (speaker, date, surroundings) in the fact's place. A user's fact from an
    earlier conversation is looked for in that conversation.
    """
    have = {place(t.memory) for t in turns}
    wanted = {at for e in events if (at := place(e.memory)) is not None and (
        e.memory.session_id == namespace.session_id or e.memory.user_id == namespace.user_id)} - have - shown
    if not wanted:
        return turns
    known = {t.memory.id for t in turns}
    extra = [Ranked(m, 0.0, {"holder": 1.0}) for m in readable(archived_at(namespace, wanted, deps))
             if m.id not in known]
    return turns + extra


def with_neighbours(hits: list[Ranked], namespace: Namespace, deps: Deps,
                    monologue: float = MONOLOGUE_DECAY) -> list[Ranked]:
    """Return the hits plus the messages around the best of them, with decayed scores.

    The reply to a hit that asks something is where its answer is: it inherits REPLY_DECAY of the hit's
    score; other neighbours NEIGHBOUR_DECAY per step, up to NEIGHBOUR_SPAN messages away, never across days (a
    message dated another day belongs to another sitting). A message next to several hits keeps its best score
    plus NEIGHBOUR_SUM of the next best. That holds within an exchange: the same turn, or someone else speaks
    between the neighbour and the hit (or is the neighbour). A run of one speaker's messages (notes sent one by
    one, a memory bank) holds unrelated threads side by side: there a neighbour is noise that took a direct hit's
    tokens, and it keeps only `monologue` of its score. Issue 17, dev splits of bench.recall at 1k (neighbours
    outside an exchange left out): zh-daily 93.3 -> 94.7, MADial en 82.9 -> 86.0, MADial zh and LoCoMo within 0.3.
    """
    best = [h for h in hits[:NEIGHBOUR_HITS] if h.memory.turn_range]
    if not best:
        return hits
    wanted = {(session, turn + step) for h in best if (at := place(h.memory)) is not None  # turns around each hit
              for session, turn in [at] for step in range(-NEIGHBOUR_SPAN, NEIGHBOUR_SPAN + 1)}
    # In its own conversation: an earlier conversation's message has its neighbours there (issue 48).
    around = sorted(committed(readable(archived_at(namespace, wanted, deps)), lambda m: m, deps),
                    key=lambda m: (m.session_id or "", *message_order(m)))
    position = {m.id: i for i, m in enumerate(around)}
    found = {h.memory.id: h for h in hits}
    speakers = [speaker_key(m) for m in around]
    for hit in best:
        index = position.get(hit.memory.id)
        if index is None:
            continue
        asks = _QUESTION.search(hit.memory.content) is not None
        for step in (*range(-NEIGHBOUR_SPAN, 0), *range(1, NEIGHBOUR_SPAN + 1)):
            near = index + step
            if not 0 <= near < len(around) or not same_day(around[near], hit.memory) \
                    or around[near].session_id != hit.memory.session_id:
                continue
            exchange = around[near].turn_range == hit.memory.turn_range or len(
                set(speakers[min(index, near):max(index, near) + 1])) > 1
            if not exchange and not monologue:
                continue
            decay = REPLY_DECAY if asks and step == 1 else NEIGHBOUR_DECAY ** abs(step)
            decay *= 1.0 if exchange else monologue
            score = round(hit.score * decay, 4)
            neighbour = around[near]
            previous = found.get(neighbour.id)
            if previous is None:
                found[neighbour.id] = Ranked(neighbour, score, {"neighbour": 1.0})
            else:  # a hit, or a neighbour of another hit: the best score plus a share of the other
                high, low = max(previous.score, score), min(previous.score, score)
                found[neighbour.id] = Ranked(neighbour, round(high + NEIGHBOUR_SUM * low, 4), previous.parts)
    return list(found.values())


def message_day(memory: Memory) -> str | None:
    """Return the day an archived message was said on (its `time` or `date` meta, normalised), or None."""
    when = memory.meta.get("time") or memory.meta.get("date")
    if memory.kind != "turn" or not isinstance(when, str) or not when.strip():
        return None
    return _day(when.strip()[:MAX_DAY_CHARS])


# A date header is short ("1:56 pm on 8 May, 2023", "2024年3月5日 周二"); the meta is the caller's and may be long:
# only its head is read, so a megabyte `time` costs neither a scan per candidate nor a megabyte in the cache.
MAX_DAY_CHARS = 64
# A conversation has a few dozen dates and every call reads each of its 100-300 candidates' date: parsed once,
# kept in the text cache (bounded by bytes, ACN_TEXT_CACHE_MB).
_day = TEXT_CACHE.cached(text_bytes)(normalise_date)


def same_day(one: Memory, other: Memory) -> bool:
    """Return False only when both messages carry a day and the days differ."""
    first, second = message_day(one), message_day(other)
    return first is None or second is None or first == second


def speaker_key(memory: Memory) -> str:
    """Return who said an archived message: its `name`, else its role."""
    return str(memory.meta.get("name") or memory.meta.get("role") or "")


def message_order(memory: Memory) -> tuple[int, int, int]:
    """Return where an archived message sits in the conversation: turn, message index, part.

    Never raises: a position the row does not hold as an integer counts as 0 (see unreadable_reason).
    """
    meta = memory.meta
    return ((memory.turn_range or [0])[0], meta_int(meta, "message_index") or 0, meta_int(meta, "part") or 0)


def unreadable_reason(memory: Memory) -> str | None:
    """Return why a stored archived message cannot be placed in the conversation, or None when it can.

    Requests cannot store such a row any more (422), but rows written before that check, or by other means,
    may hold one: readers skip them instead of failing the whole session. The same for a row whose stamps,
    version or turn numbers are outside what later arithmetic can hold (acn/common/stored.py).
    """
    # One lookup a row (a call checks ~200 candidates and neighbours at turn 1,000 of a long chat, most of them
    # several times): the check is kept with the row like memory_problem's, by the fields both read and the kind.
    return remembered(memory, "unreadable", (memory.kind, *checked_fields(memory)), operator.eq,
                      lambda: _unreadable_reason(memory))


def _unreadable_reason(memory: Memory) -> str | None:
    if memory.kind == "turn" and (why := reserved_meta_error(memory.meta)) is not None:
        return why
    return first_problem(memory)


def readable(memories: list[Memory]) -> list[Memory]:
    """Return the memories whose stored position can be read; the others are logged and skipped."""
    kept = []
    for memory in memories:
        reason = unreadable_reason(memory)
        if reason is None:
            kept.append(memory)
        else:
            log.warning("skipping stored row %s: %s", memory.id, reason)
    return kept
