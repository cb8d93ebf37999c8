"""The compaction section of `Settings` (acn/common/settings.py composes the sections)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acn.common.models import StrictModel


class CompactionSettings(StrictModel):
    """How much one request may compact, how many compactions run at once, and which memories are the user's."""

    max_compact_messages: int = Field(
        default=1000, ge=1,
        description=(
            "Most messages one request may have compacted. A stateless `compact` (`messages` given) or a `record_turn` "
            "with more is refused with 422 `too_much_work` (the field named, nothing stored); the session buffer is "
            "compacted this much at a time, oldest whole segments first (the rest stays verbatim for the next call). "
            "Compaction is linear: ~0.5 s for 1,000 messages and ~1.3 s CPU for one 95,000-character message here "
            "(`python -m bench.compaction_cost`), so the defaults keep a request to about a second or two."
        ),
    )
    max_compact_chars: int = Field(
        default=100_000, ge=1,
        description="Most characters of message text one request may have compacted; as `ACN_MAX_COMPACT_MESSAGES`.",
    )
    compaction_concurrency: int = Field(
        default=2, ge=1, le=64,
        description=(
            "Extractive (CPU-bound) compactions one process runs at once; at most as many more wait for a slot, so "
            "compaction never holds more than twice this many request threads and retrieval, assembly and `/healthz` "
            "keep theirs. An LLM compaction takes no slot."
        ),
    )
    compaction_wait_seconds: float = Field(
        default=2.0, ge=0, le=60,
        description=(
            "How long a compaction waits for a slot (at most `ACN_COMPACTION_CONCURRENCY` wait; more are refused at "
            "once). Then `compact` answers 503 `busy` with `Retry-After`, and `record_turn` records the turn and "
            "leaves its compaction to a later turn (`compaction.reason: \"busy\"`)."
        ),
    )
    user_memory: Literal["profile", "all", "off"] = Field(
        default="profile",
        description=(
            "Which memories `record_turn` (and `memory_write` with `extract`) writes as the user's when a request "
            "carries a `user_id`: scope `user`, read by every later conversation of that user with the same agent. "
            "`profile` (the rule in [how-it-works.md](how-it-works.md#what-a-returning-user-keeps)): what the user "
            "states about themselves — identity, preferences, constraints about them, profile fields (name, phone, "
            "address, e-mail, invoice title, birthday, allergies …), a changed field superseding the old value across "
            "conversations; what belongs to one conversation (an order, a ticket, today's task) stays in it. `all`: "
            "every extracted memory is the user's. `off`: every one stays in its conversation. A request's "
            "`user_memory` overrides it; without a `user_id` nothing is the user's."
        ),
    )
