"""The assemble node's request and response models (acn/assembly/assemble.py is the pipeline that fills them)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from acn.assembly.budget import BudgetRatios
from acn.common.models import (
    Message,
    MessageList,
    Namespace,
    NodeResponse,
    StrictModel,
    parse_json_object_or_null,
    parse_json_string,
)
from acn.text.lang import Language

Mode = Literal["snapshot", "focused", "streaming", "auto"]
# The layers of an assembled context, in the order their messages are given to the model.
LAYERS = ("system", "memory", "working", "history", "user_input")


class AssembleRequest(Namespace):
    """Build the context for one model call."""

    max_tokens: int = Field(default=4000, ge=16, le=2_000_000, description="Hard budget for the whole context.")
    system_prompt: str = Field(default="", max_length=200_000, description="Identity / system layer; never dropped.")
    user_input: str = Field(default="", max_length=200_000, description="The new user message; never dropped.")
    messages: MessageList | None = Field(default=None, max_length=5000,
                                         description="Recent turns; default: the session buffer.")
    working_summary: str | None = Field(default=None, max_length=200_000,
                                        description="Working state text; default: the session's segments.")
    memories: Annotated[list[str] | None, BeforeValidator(parse_json_string)] = Field(
        default=None, description="Memory lines to inject instead of retrieving.")
    knowledge: Annotated[list[str] | None, BeforeValidator(parse_json_string)] = Field(
        default=None, description="Knowledge snippets (FAQ, rules) for the memory layer.")
    mode: Mode = Field(default="auto", description="snapshot | focused | streaming | auto.")
    budget: Annotated[BudgetRatios | None, BeforeValidator(parse_json_object_or_null)] = Field(
        default=None, description="Layer ratios; default 15/50/25/10 (a JSON string works too).")
    phase: Literal["requirement", "execution", "closing"] | None = Field(
        default=None, description="Phase preset for the ratios (overrides budget).")
    top_k: int = Field(default=5, ge=0, le=50, description="Memories retrieved for the input (focused mode).")
    archive_top_k: int | None = Field(
        default=None, ge=0, le=50,
        description="Archived raw messages retrieved verbatim for the input (focused mode); default: as many "
                    "as the memory layer's budget holds, up to 50.")
    language: Language | None = Field(default=None, description="Language of tags; default: the input's.")
    probes: Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], BeforeValidator(parse_json_string)] = (
        Field(default_factory=list, max_length=50,
              description="Amnesia probes: facts this session must still carry (e.g. an order number); the "
                          "response says which the assembled context contains."))


class Dropped(StrictModel):
    layer: str
    id: str
    kind: str
    reason: str
    tokens: int


class Source(StrictModel):
    id: str
    kind: str
    layer: str
    turn_range: list[int] | None = None
    meta: dict[str, Any] = Field(default_factory=dict)


class Tokens(StrictModel):
    total: int
    budget: int
    by_layer: dict[str, int]


class AssembleResponse(NodeResponse):
    mode: str = Field(description="The mode used (auto resolves to snapshot or focused).")
    messages: list[Message]
    system_text: str = Field(description="System prompt, memory and working state in one string.")
    memory_text: str
    working_text: str
    history_text: str
    prompt: str = Field(description="Everything as one string, for nodes that take a single prompt.")
    tokens: Tokens
    dropped: list[Dropped]
    sources: list[Source]
    probes: dict[str, bool] = Field(default_factory=dict, description="Each probe: is it in the context?")
    degraded: dict[str, str] = Field(
        default_factory=dict, description="Providers that failed and were left out, e.g. {\"dense\": "
        "\"unavailable\"}: the memories were found by BM25 alone (see /metrics acn_degraded).")
