"""A returning user's earlier conversations in focused recall (issue 48).

With a `user_id`, the user's archived messages of their other conversations with the agent are retrieval
candidates beside the conversation's own (acn/storage/repositories/user_archive.py) and ranked with them: their
neighbours are read in their own conversation, each line is headed by the day of its conversation and names it in
`sources[].meta.from_conversation` (its turn number is that conversation's, not this one's).

What belonged to one conversation's business (an order, a parcel, a refund: acn/text/triggers.py) stays in it
unless the input asks about an earlier conversation ("上次说的那个退款怎么样了？"): a new conversation's "我的订单发货了
吗？" is about a new order, and an old order's number would be the wrong answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from acn.common.models import Memory, Namespace
from acn.memory.lines import utc_day
from acn.retrieval.hybrid_rank import Ranked
from acn.services.deps import Deps
from acn.text.triggers import asks_about_earlier_conversation, conversation_business

FROM_CONVERSATION = "from_conversation"

Place = tuple[str, int]  # (session id, turn): where an archived message sits among the user's conversations


def place(memory: Memory) -> Place | None:
    """Return the conversation and turn of an archived message or extracted fact (None: it has no turn)."""
    return (memory.session_id or "", memory.turn_range[0]) if memory.turn_range else None


def archived_at(namespace: Namespace, places: Iterable[Place], deps: Deps) -> list[Memory]:
    """Return the live archived messages at these places, read in each one's own conversation of the user (only
    the asking conversation's when the namespace has no user)."""
    turns: dict[str, set[int]] = {}
    for session, turn in places:
        if session == namespace.session_id or (session and namespace.user_id):
            turns.setdefault(session, set()).add(turn)
    own = turns.pop(namespace.session_id, None)
    found: list[Memory] = []
    if turns:  # other conversations': from the index of the user's archive when it is held (no load per conversation)
        places_held = [(s, t) for s, wanted in turns.items() for t in wanted]
        held = deps.memories.queries.earlier_at(deps.tenant, namespace, places_held)
        if held is not None:
            found, turns = [m for m in held if m.user_id == namespace.user_id], {}
    if own is not None:
        turns[namespace.session_id] = own
    for session, wanted in sorted(turns.items()):
        where = namespace if session == namespace.session_id else Namespace(
            agent_id=namespace.agent_id, session_id=session, user_id=namespace.user_id)
        found += [m for m in deps.memories.archived_messages(deps.tenant, where, sorted(wanted))
                  if session == namespace.session_id or m.user_id == namespace.user_id]
    return found


def from_other(namespace: Namespace, memory: Memory) -> bool:
    """Return True when an archived message is another conversation's."""
    return memory.kind == "turn" and memory.session_id != namespace.session_id


def kept_earlier(namespace: Namespace, query: str, candidates: list[Ranked]) -> list[Ranked]:
    """Return the candidates without other conversations' messages about their own business, unless the input
    asks about an earlier conversation."""
    if not namespace.user_id or asks_about_earlier_conversation(query):
        return candidates
    return [c for c in candidates if not (from_other(namespace, c.memory) and conversation_business(c.memory.content))]


def dated(memory: Memory) -> Memory:
    """Return the message as the layer shows it: headed by the day it was said (unless it carries a date), and
    naming its conversation in `sources[].meta.from_conversation` (its turn number is that conversation's)."""
    meta = {**memory.meta, FROM_CONVERSATION: memory.session_id}
    when = memory.meta.get("time") or memory.meta.get("date")
    if not (isinstance(when, str) and when.strip()):
        meta["date"] = utc_day(memory.created_at)
    return memory.model_copy(update={"meta": meta})


def from_earlier_conversation(source: dict[str, Any]) -> bool:
    """Return True when a memory-layer line's source is a message of another conversation (its turn number is not
    this conversation's)."""
    meta = source.get("meta")
    return isinstance(meta, dict) and FROM_CONVERSATION in meta
