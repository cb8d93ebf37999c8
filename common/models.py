"""Data shapes shared by every node: identifiers, messages, memories, segments."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"

# Identifiers are the only values that ever reach a Milvus filter, so they are held to a
# strict alphabet: no quotes, spaces or brackets can get through to an expression.
Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]

Role = Literal["system", "user", "assistant", "tool"]
MemoryKind = Literal[
    "identity", "preference", "constraint", "decision", "fact",
    "todo", "artifact", "knowledge", "summary", "turn",
]
Scope = Literal["session", "user", "agent", "shared"]
Language = Literal["zh", "en"]


def parse_json_string(value: Any) -> Any:
    """Accept a JSON string wherever a list or object is expected (Dify and Coze pass objects as strings)."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("[", "{"):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError as error:
                raise ValueError(f"not valid JSON: {error.msg} at position {error.pos}") from None
        if stripped == "":
            return []
    return value


class StrictModel(BaseModel):
    """Base for every request/response model: unknown fields are an error, never silently dropped."""

    model_config = ConfigDict(extra="forbid")


def message_text(content: Any) -> str:
    """Return the text of an OpenAI content value (a string or a list of content parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [part.get("text", "") for part in content if isinstance(part, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return str(content)


class Message(StrictModel):
    """One chat message in the OpenAI shape, plus the turn number and caller provenance."""

    role: Role
    content: str = Field(
        default="",
        description="Message text. OpenAI content-part lists are accepted and joined into text.",
    )
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(
        default=None, description="Assistant tool calls, OpenAI shape ({id, type, function{name, arguments}})."
    )
    tool_call_id: str | None = Field(default=None, description="For role=tool: the id of the call answered.")
    turn: int | None = Field(default=None, ge=0, description="Turn number; filled in by the server when absent.")
    meta: dict[str, Any] = Field(default_factory=dict, description="Caller provenance, carried through untouched.")


def _normalise_content(value: Any) -> Any:
    """Turn content-part lists and null content (assistant tool calls) into plain text."""
    if isinstance(value, dict) and "content" in value and not isinstance(value["content"], str):
        value = {**value, "content": message_text(value["content"])}
    return value


MessageItem = Annotated[Message, BeforeValidator(_normalise_content)]
MessageList = Annotated[
    list[MessageItem],
    BeforeValidator(parse_json_string),
    Field(description="Chat messages; a JSON string of the list is accepted too."),
]
JsonObject = Annotated[dict[str, Any], BeforeValidator(parse_json_string)]


class Namespace(StrictModel):
    """Where a stateful request reads and writes: agent, session and optionally user."""

    agent_id: Identifier = Field(description="The agent (Dify: the app id).")
    session_id: Identifier = Field(description="The conversation (Dify: sys.conversation_id).")
    user_id: Identifier | None = Field(
        default=None, description="The end user (Dify: sys.user_id); enables cross-session memory."
    )


class Memory(StrictModel):
    """A stored memory as the nodes return it."""

    id: str
    kind: MemoryKind
    content: str
    key: str | None = None
    importance: float
    scope: Scope
    agent_id: str
    session_id: str
    user_id: str | None = None
    created_at: int = Field(description="UTC epoch milliseconds.")
    updated_at: int = Field(description="UTC epoch milliseconds.")
    version: int
    valid_to: int | None = Field(default=None, description="Set when superseded (UTC epoch ms).")
    superseded_by: str | None = None
    turn_range: list[int] | None = None
    source_ids: list[str] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)
    history: list[dict[str, Any]] | None = Field(
        default=None, description="Earlier versions (content, version, updated_at), oldest first."
    )


class Decision(StrictModel):
    decision: str
    reason: str | None = None


class Segment(StrictModel):
    """A compaction result covering a range of turns."""

    id: str
    turn_range: list[int] = Field(description="[first_turn, last_turn], inclusive.")
    goal: str = ""
    constraints: list[str] = Field(default_factory=list)
    done: list[str] = Field(default_factory=list)
    todo: list[str] = Field(default_factory=list)
    decisions: list[Decision] = Field(default_factory=list)
    facts: list[str] = Field(default_factory=list)
    key_numbers: dict[str, str] = Field(default_factory=dict)
    text: str = ""
    tokens: int = 0


class NodeResponse(StrictModel):
    """Base of every node response: the success envelope."""

    ok: Literal[True] = True
    request_id: str = Field(default="", description="Echoed in logs; filled in by the server.")
