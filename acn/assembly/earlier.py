"""A returning user's earlier conversations: when the input asks about one ("上次说的那个退款怎么样了？"), the user's
archived messages of their other conversations with the agent that match it join the memory layer, each under the
day of its conversation (issue 48).

Only with a `user_id` and an input that refers to an earlier time (acn/text/triggers.py): any other input reads
none of them (a returning user's ordinary question costs no pass over their archive). They come after the
conversation's own candidates, at most EARLIER_LIMIT, so they take only what the layer has left.
"""

from __future__ import annotations

from typing import Any

from acn.common.models import Memory, Namespace
from acn.memory.lines import utc_day
from acn.services.deps import Deps
from acn.text.triggers import asks_about_earlier_conversation

EARLIER_LIMIT = 6
FROM_CONVERSATION = "from_conversation"


def earlier_conversation_memories(namespace: Namespace, user_input: str, deps: Deps) -> list[Memory]:
    """Return the user's archived messages of other conversations that the input may ask about, best first,
    each dated by its conversation's day (its own `meta.date` / `meta.time` when it has one)."""
    if not namespace.user_id or not asks_about_earlier_conversation(user_input):
        return []
    found = deps.memories.queries.earlier_messages(deps.tenant, namespace, user_input, limit=EARLIER_LIMIT)
    return [dated(memory) for memory in found]


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
