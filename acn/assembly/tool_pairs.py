"""Keep an assembled history a valid chat message list: every tool message answers a call, every call is answered."""

from __future__ import annotations

from acn.assembly.models import Dropped
from acn.common.metrics import ORPHAN_TOOL_MESSAGE, UNANSWERED_TOOL_CALL
from acn.common.models import Message
from acn.services.deps import Deps


def paired_tool_messages(messages: list[Message], deps: Deps) -> tuple[list[Message], list[Dropped]]:
    """Return the history as a valid chat message list, and what was removed to make it one (for `dropped`).

    OpenAI-style APIs reject a `tool` message that does not answer a call of the assistant message right before
    its run of tool messages, and an assistant `tool_calls` entry left unanswered. A session can hold both (a
    tool message recorded without its call, a result dropped by an edit rule): the orphan tool message is left
    out, the unanswered call is taken off its assistant message (the message goes too when nothing else is left).
    """
    kept: list[Message] = []
    dropped: list[Dropped] = []
    open_calls: set[str] = set()  # ids the current run of tool messages may still answer
    for index, message in enumerate(messages):
        turn = f"turn-{message.turn}" if message.turn is not None else f"message-{index}"
        if message.role == "tool":
            if message.tool_call_id is not None and message.tool_call_id in open_calls:
                open_calls.discard(message.tool_call_id)
                kept.append(message)
            else:
                dropped.append(Dropped(layer="history", id=turn, kind="tool", reason=ORPHAN_TOOL_MESSAGE,
                                       tokens=deps.tokenizer.count_message(message)))
            continue
        open_calls = set()
        if message.role == "assistant" and message.tool_calls:
            answered = answered_ids(messages, index)
            calls = [c for c in message.tool_calls if isinstance(c.get("id"), str) and c["id"] in answered]
            for _call in range(len(message.tool_calls) - len(calls)):
                dropped.append(Dropped(layer="history", id=turn, kind="tool_call", reason=UNANSWERED_TOOL_CALL,
                                       tokens=0))
            open_calls = {c["id"] for c in calls}
            if len(calls) != len(message.tool_calls):
                message = message.model_copy(update={"tool_calls": calls or None})
            if not calls and not message.content:
                continue  # a tool-call message with no call left says nothing
        kept.append(message)
    return kept, dropped


def answered_ids(messages: list[Message], index: int) -> set[str]:
    """Return the tool_call_ids answered by the run of tool messages right after messages[index]."""
    ids: set[str] = set()
    for message in messages[index + 1:]:
        if message.role != "tool":
            break
        if message.tool_call_id is not None:
            ids.add(message.tool_call_id)
    return ids
