"""What the memory write path takes and returns: items to write, their default importance, write results."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from acn.common.models import (
    KEY_PATTERN,
    MemoryKind,
    MetaObject,
    Scope,
    StrictModel,
    TurnNumber,
)

# Rule-based importance, never model-judged (reproducible, and no model call per write): identity 8,
# rules/knowledge 7, preferences 6 …
DEFAULT_IMPORTANCE: dict[str, float] = {
    "identity": 8, "knowledge": 7, "constraint": 7, "decision": 7, "preference": 6,
    "fact": 5, "todo": 5, "artifact": 5, "summary": 4, "turn": 3,
}
# identity too: a profile field (phone, address …) a user states again, keyed by the field (memory/durable.py).
SUPERSEDING_KINDS = ("decision", "constraint", "preference", "identity")
MAX_CONTENT_CHARS = 8000


class MemoryItem(StrictModel):
    """One memory to write."""

    kind: MemoryKind = Field(default="fact", description="What the memory is; decides default importance.")
    content: str = Field(min_length=1, max_length=MAX_CONTENT_CHARS, description="The memory text.")
    key: str | None = Field(
        default=None, max_length=128, pattern=KEY_PATTERN,
        description="Topic key: a new decision/constraint/preference with the same key supersedes the old one.",
    )
    importance: float | None = Field(default=None, ge=0, le=10, description="0–10; default by kind.")
    scope: Scope = Field(default="session", description="session | user | agent | shared.")
    meta: MetaObject = Field(default_factory=dict, description="Caller provenance, stored untouched "
                             "(message_index, part and parts, when given, must be non-negative integers).")
    turn: TurnNumber | None = Field(default=None, description="Turn the memory comes from.")
    turn_range: list[TurnNumber] | None = Field(default=None, min_length=2, max_length=2, description="[from, to].")

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("content is empty")
        return value.strip()


Action = Literal["added", "updated", "duplicate", "superseded"]


class WriteResult(StrictModel):
    id: str
    action: Action
    version: int
    kind: MemoryKind
    content: str
    superseded_ids: list[str] = Field(default_factory=list)
