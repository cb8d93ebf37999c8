"""Standing memories: who the user is and what is in force (identity, constraints, decisions, preferences).

Every mode's context carries them (seed 000's persistent layer), not only the ones a question happens to match:
"我要转账到哪个账户？" shares no word with "我是VIP客户，已开通自动退款", yet an answer that ignores it is wrong.
In focused mode they take at most STANDING_SHARE of the context, most important first; retrieval has the rest.
"""

from __future__ import annotations

from acn.assembly.recall import readable
from acn.common.models import Memory, Namespace
from acn.memory.lines import folded_content
from acn.services.deps import Deps
from acn.text.tokens import Tokenizer

STANDING_KINDS = ["identity", "constraint", "preference", "decision"]
# What a focused context carries whatever the question: who the user is and the rules and decisions in force.
# Preferences are many in a chatty conversation ("我喜欢…") and are retrieved when the question touches them.
FOCUSED_KINDS = ["identity", "constraint", "decision"]
# Share of a focused context that standing memories may take before retrieval: at 1,000 tokens about three
# short lines. Kept small because a long conversation extracts many of them and retrieval must keep its room.
STANDING_SHARE = 0.08
STANDING_LIMIT = 200


def standing_memories(namespace: Namespace, deps: Deps, kinds: list[str] | None = None) -> list[Memory]:
    """Return the memories of these kinds (default STANDING_KINDS) in force, most important (then newest) first."""
    wanted = kinds or STANDING_KINDS
    found = deps.memories.queries.standing(deps.tenant, namespace, wanted, limit=STANDING_LIMIT)
    return sorted(found, key=lambda m: (-m.importance, -m.updated_at))


def within_share(memories: list[Memory], tokens: int, tokenizer: Tokenizer) -> list[Memory]:
    """Return the leading memories whose texts fit in `tokens` (a line's tag is counted as a few tokens more)."""
    kept, used = [], 0
    for memory in memories:
        cost = tokenizer.count(memory.content) + STANDING_TAG_TOKENS
        if used + cost > tokens:
            continue  # a shorter one further down may still fit
        kept.append(memory)
        used += cost
    return kept


STANDING_TAG_TOKENS = 12  # "[来自记忆 · 身份 · 第10轮] " and the newline


def as_messages(memories: list[Memory], namespace: Namespace, deps: Deps) -> list[Memory]:
    """Return the memories with each one extracted word for word from an archived message replaced by that
    message (its speaker and date come with it), as focused recall serves a retrieved fact (point_back)."""
    turns = sorted({m.turn_range[0] for m in memories if m.turn_range})
    if not turns:
        return memories
    by_turn: dict[int, list[Memory]] = {}
    for message in readable(deps.memories.archived_messages(deps.tenant, namespace, turns)):
        by_turn.setdefault((message.turn_range or [-1])[0], []).append(message)
    served = []
    for memory in memories:
        folded = folded_content(memory)
        holder = next((m for m in by_turn.get((memory.turn_range or [-1])[0], [])
                       if folded and folded in folded_content(m)), None)
        served.append(holder or memory)
    return list({m.id: m for m in served}.values())
