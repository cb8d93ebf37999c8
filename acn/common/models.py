"""Data shapes shared by every node: identifiers, messages, memories, segments."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

IDENTIFIER_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"

# Identifiers are the only values that ever reach a Milvus filter, so they are held to a
# strict alphabet: no quotes, spaces or brackets can get through to an expression.
Identifier = Annotated[str, StringConstraints(pattern=IDENTIFIER_PATTERN)]
# Keys (topic keys of memories) may be any language but never carry what could end a filter literal.
KEY_PATTERN = r"^[^\"'\\`\x00-\x1f\x7f]+$"

Role = Literal["system", "user", "assistant", "tool"]
MemoryKind = Literal[
    "identity", "preference", "constraint", "decision", "fact",
    "todo", "artifact", "knowledge", "summary", "turn",
]
Scope = Literal["session", "user", "agent", "shared"]


# Milvus stores integers as int64 and JSON numbers as doubles: anything beyond is refused at the door
# (422) instead of failing in the store. Turn and version numbers get a far smaller ceiling.
INT64_MAX = 2**63 - 1
MAX_TURN = 10**9
MAX_VERSION = 2**53
MAX_JSON_DEPTH = 16


def check_json_value(value: Any, depth: int = 0) -> Any:
    """Return value unchanged if the store can keep it: int64 integers, finite floats, bounded depth."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested deeper than {MAX_JSON_DEPTH} levels")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if not -INT64_MAX - 1 <= value <= INT64_MAX:
            raise ValueError("integer outside the 64-bit range")
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError("number is not finite")
        return value
    if isinstance(value, list):
        return [check_json_value(item, depth + 1) for item in value]
    if isinstance(value, dict):
        return {str(k): check_json_value(v, depth + 1) for k, v in value.items()}
    return value


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


# Meta fields the server itself reads back as integers (where an archived message sits: message index, piece of a
# long message, number of pieces). A caller may set them, but only to what they mean: a non-negative integer.
RESERVED_INT_META = ("message_index", "part", "parts")


def reserved_meta_error(meta: dict[str, Any]) -> str | None:
    """Return what is wrong with meta's reserved fields ("meta.part must be ..."), or None when they are usable."""
    for field in RESERVED_INT_META:
        if field in meta:
            value = meta[field]
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= INT64_MAX:
                return f"meta.{field} must be a non-negative integer (the server reads it), got {type(value).__name__}"
    return None


def check_meta(value: dict[str, Any]) -> dict[str, Any]:
    """Return the meta object if the store can keep it and the server can read its reserved fields back."""
    value = check_json_value(value)
    problem = reserved_meta_error(value)
    if problem:
        raise ValueError(problem)
    return value


def meta_int(meta: dict[str, Any], field: str) -> int | None:
    """Return a reserved integer meta field (0 when absent), or None when a stored row holds something else."""
    value = meta.get(field, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


SafeJsonObject = Annotated[dict[str, Any], AfterValidator(check_json_value)]
# Caller meta of a memory to write: storable, and its reserved fields usable (see RESERVED_INT_META); a message's
# meta is checked by MessageItem.
MetaObject = Annotated[dict[str, Any], AfterValidator(check_meta)]
TurnNumber = Annotated[int, Field(ge=0, le=MAX_TURN)]


def parse_json_object(value: Any) -> Any:
    """Accept a JSON string for an object field; an empty string means the defaults."""
    if isinstance(value, str) and not value.strip():
        return {}
    return parse_json_string(value)


def parse_json_object_or_null(value: Any) -> Any:
    """Accept a JSON string for an optional object field; an empty string means null."""
    if isinstance(value, str) and not value.strip():
        return None
    return parse_json_string(value)


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
        parts = [part.get("text") for part in content if isinstance(part, dict)]
        return "\n".join(p for p in parts if isinstance(p, str) and p)  # image parts carry no text
    return str(content)


class Message(StrictModel):
    """One chat message in the OpenAI shape, plus the turn number and caller provenance."""

    role: Role
    content: str = Field(
        default="",
        description="Message text. OpenAI content-part lists are accepted and joined into text.",
    )
    name: str | None = None
    tool_calls: list[Annotated[dict[str, Any], AfterValidator(check_json_value)]] | None = Field(
        default=None, description="Assistant tool calls, OpenAI shape ({id, type, function{name, arguments}})."
    )
    tool_call_id: str | None = Field(default=None, description="For role=tool: the id of the call answered.")
    turn: int | None = Field(default=None, ge=0, le=MAX_TURN,
                             description="Turn number; filled in by the server when absent.")
    meta: SafeJsonObject = Field(default_factory=dict, description="Caller provenance, carried through untouched "
                                 "(message_index, part and parts, when given, must be non-negative integers).")


def _normalise_content(value: Any) -> Any:
    """Turn content-part lists and null content (assistant tool calls) into plain text; refuse other content.

    What the OpenAI chat shape allows: a string; a list of content parts (objects: text parts are joined, others
    such as images carry no text here); null only on an assistant message that carries tool_calls. A number,
    an object or a null anywhere else is a caller's mistake and is refused (422), not stored as its repr.
    """
    if not isinstance(value, dict) or "content" not in value or isinstance(value["content"], str):
        return value
    content = value["content"]
    if content is None:
        if value.get("role") == "assistant" and value.get("tool_calls"):
            return {**value, "content": ""}
        raise ValueError("content may be null only on an assistant message with tool_calls; send a string")
    if isinstance(content, list):
        if not all(isinstance(part, dict) for part in content):
            raise ValueError("content must be a string or a list of content-part objects ({type, text})")
        return {**value, "content": message_text(content)}
    raise ValueError(f"content must be a string or a list of content parts, not {type(content).__name__}")


def _check_message_meta(message: Message) -> Message:
    """Refuse a request's message whose reserved meta fields the server could not read back (see check_meta).

    Checked on messages that come in (MessageItem), not on the Message model itself: session snapshots stored
    before the check must still load.
    """
    problem = reserved_meta_error(message.meta)
    if problem:
        raise ValueError(problem)
    return message


MessageItem = Annotated[Message, BeforeValidator(_normalise_content), AfterValidator(_check_message_meta)]
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
