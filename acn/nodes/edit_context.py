"""EditContext: deterministic rule-based edits of a message list before it reaches the model."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from acn.common.models import Message, MessageList, NodeResponse, StrictModel, parse_json_object
from acn.editing.edit import Edit, EditRules, edit_messages
from acn.nodes.spec import Description, NodeSpec
from acn.services.deps import Deps
from acn.text.tokens import Tokenizer


class EditContextRequest(StrictModel):
    """A message list and the rules to edit it by."""

    messages: MessageList = Field(max_length=5000)
    rules: Annotated[EditRules, BeforeValidator(parse_json_object)] = Field(
        default_factory=EditRules, description="Edit rules (a JSON string of the object works too)."
    )
    protect_last: int = Field(
        default=2,
        ge=0,
        le=1000,
        description="The last N turns (a turn starts at a user message) are never edited.",
    )


class EditContextResponse(NodeResponse):
    """The edited messages, the edits and the token counts before and after."""

    messages: list[Message]
    edits: list[Edit]
    tokens_before: int
    tokens_after: int


def run(request: EditContextRequest, deps: Deps) -> EditContextResponse:
    """Apply the rules in order: redact, drop pleasantries, dedupe, clear and shrink tool results."""
    messages = list(request.messages)
    kept, edits = edit_messages(messages, request.rules, request.protect_last, deps.tokenizer)
    return EditContextResponse(
        messages=kept,
        edits=edits,
        tokens_before=_total_tokens(messages, deps.tokenizer),
        tokens_after=_total_tokens(kept, deps.tokenizer),
    )


def _total_tokens(messages: list[Message], tokenizer: Tokenizer) -> int:
    """Return the tokens a message list costs."""
    return sum(tokenizer.count_message(message) for message in messages)


NODE = NodeSpec(
    name="edit_context",
    request_model=EditContextRequest,
    response_model=EditContextResponse,
    run=run,
    summary="Edit a message list by rules before it reaches the model",
    stateful=False,
    description=Description(
        human_en=(
            "Clean a conversation before the model sees it: drop thanks and greetings, remove repeated "
            "messages, clear or shrink old tool results and optionally mask personal data. The last turns, "
            "system messages and the latest user message are never dropped; tool calls keep their results."
        ),
        human_zh=(
            "在模型看到对话之前先整理：去掉客套话和重复消息，清理或压缩旧的工具结果，可选脱敏个人信息。"
            "最近几轮、系统消息和最新的用户消息不会被删除，工具调用与其结果始终成对保留。"
        ),
        llm_en=(
            "Reduce the tokens of a message list without losing content: pass messages and rules; get the "
            "edited messages, a list of edits with reasons, and token counts before and after."
        ),
        llm_zh=(
            "在不丢失内容的前提下减少消息列表的 token：传入 messages 和 rules，"
            "返回编辑后的消息、每处编辑的原因以及前后 token 数。"
        ),
    ),
)
