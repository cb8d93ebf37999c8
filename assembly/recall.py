"""Focused-mode recall: memories and archived raw turns for the input, expanded and deduplicated.

Retrieval (BM25, fused with dense vectors when an embedder is configured) finds the memories and the archived
messages that match the input. Then:
- an extracted fact that an archived message of the same turn already says in full points back to that
  message: the message (with its speaker and surroundings) is served instead of the fragment;
- the messages around the best hits (the question before an answer, the reply after a statement) join the
  candidates with a decayed score, so that when the budget allows, the context holds the exchange;
- everything is ordered by score; the layer fitting then packs it into the budget.
"""

from __future__ import annotations

from common.deps import Deps
from common.models import Memory, MemoryKind, Message, Namespace
from nodes.memory_retrieve import MemoryRetrieveRequest, RetrievedMemory, rank
from storage.base import Filter
from storage.memories import MemoryRepository, live_filter, scope_filter
from text.query import resolve_back_reference
from text.similarity import normalise

# How many archived messages focused mode considers when the request does not cap it.
TURN_POOL = 50
# Messages next to the best hits, and how much of the hit's score they inherit.
NEIGHBOUR_HITS = 8
NEIGHBOUR_DECAY = 0.6


def focused_memories(namespace: Namespace, query: str, deps: Deps, *, top_k: int, turn_pool: int,
                     history: list[Message]) -> list[Memory]:
    """Return memories and archived messages for the query, best first."""
    previous = next((m.content for m in reversed(history) if m.role == "user" and m.content), None)
    query = resolve_back_reference(query, previous)
    events = ranked(namespace, query, deps, kinds=None, top_k=top_k) if top_k else []
    turns = ranked(namespace, query, deps, kinds=["turn"], top_k=turn_pool) if turn_pool else []
    turns = with_neighbours(turns, namespace, deps)
    events, turns = point_back(events, turns)
    merged = sorted([*events, *turns], key=lambda m: (-m.score, -m.updated_at))
    return [Memory(**m.model_dump(exclude={"score", "score_parts"})) for m in merged]


def ranked(namespace: Namespace, query: str, deps: Deps, *, kinds: list[MemoryKind] | None,
           top_k: int) -> list[RetrievedMemory]:
    """Return the top_k memories for the query, scored exactly as memory_retrieve does."""
    request = MemoryRetrieveRequest(agent_id=namespace.agent_id, session_id=namespace.session_id,
                                    user_id=namespace.user_id, query=query, kinds=kinds, top_k=min(top_k, 50))
    return rank(request, deps)[:top_k]


def point_back(events: list[RetrievedMemory],
               turns: list[RetrievedMemory]) -> tuple[list[RetrievedMemory], list[RetrievedMemory]]:
    """Drop extracted facts that a retrieved message of their turn contains; that message inherits their score."""
    by_turn: dict[int, list[int]] = {}
    for index, turn in enumerate(turns):
        if turn.turn_range:
            by_turn.setdefault(turn.turn_range[0], []).append(index)
    kept = []
    for event in events:
        folded = normalise(event.content)
        holder = next((i for i in by_turn.get((event.turn_range or [-1])[0], [])
                       if folded and folded in normalise(turns[i].content)), None)
        if holder is None:
            kept.append(event)
        elif event.score > turns[holder].score:
            turns[holder] = turns[holder].model_copy(update={"score": event.score})
    return kept, turns


def with_neighbours(hits: list[RetrievedMemory], namespace: Namespace, deps: Deps) -> list[RetrievedMemory]:
    """Return the hits plus the messages right before and after the best of them (decayed scores)."""
    best = [h for h in hits[:NEIGHBOUR_HITS] if h.turn_range]
    if not best:
        return hits
    wanted = sorted({t for h in best for t in (h.turn_range[0] - 1, h.turn_range[0], h.turn_range[0] + 1)})  # type: ignore[index]
    memories: MemoryRepository = deps.providers["memories"]
    where = (scope_filter(namespace, ["session"]).and_(live_filter(False))
             .and_(Filter('kind == "turn" and turn_from in {near}', {"near": wanted})))
    around = sorted(memories.find(deps.tenant, where, limit=16 * len(wanted)), key=message_order)
    position = {m.id: i for i, m in enumerate(around)}
    found = {h.id: h for h in hits}
    for hit in best:
        index = position.get(hit.id)
        if index is None:
            continue
        for near in (index - 1, index + 1):
            if 0 <= near < len(around):
                score = round(hit.score * NEIGHBOUR_DECAY, 4)
                neighbour = around[near]
                if neighbour.id not in found or found[neighbour.id].score < score:
                    previous = found.get(neighbour.id)
                    parts = previous.score_parts if previous else {"neighbour": 1.0}
                    found[neighbour.id] = RetrievedMemory(**neighbour.model_dump(), score=score, score_parts=parts)
    return list(found.values())


def message_order(memory: Memory) -> tuple[int, int, int]:
    """Return where an archived message sits in the conversation: turn, message index, part."""
    meta = memory.meta
    return ((memory.turn_range or [0])[0], int(meta.get("message_index", 0)), int(meta.get("part", 0)))
