"""Editing a message list by rules: redact, drop pleasantries, dedupe, clear and shrink tool results."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from acn.common.conversation import protected_start
from acn.common.models import Message, StrictModel, parse_json_object_or_null
from acn.text.numbers import extract_key_numbers, value_present
from acn.text.pii import find_pii, redact_json_text, redact_pii, redact_value
from acn.text.pleasantries import is_pleasantry
from acn.text.similarity import PrefixFilter, can_reach, shingle_similarity, shingles
from acn.text.tokens import Tokenizer

DEFAULT_PLACEHOLDER = "[tool result of {tool} cleared: {tokens} tokens]"
EditAction = Literal["drop_pleasantry", "dedupe", "clear_tool_result", "shrink_tool_result", "redact_pii"]


class ClearToolResults(StrictModel):
    """Replace old tool results by a short placeholder (Anthropic context-editing style)."""

    keep: int = Field(default=3, ge=0, le=1000, description="The most recent tool results left untouched.")
    trigger_tokens: int = Field(
        default=0,
        ge=0,
        le=10_000_000,
        description="Clear only when all tool results together exceed this many tokens (0: always).",
    )
    exclude_tools: list[str] = Field(
        default_factory=list, max_length=200, description="Tool names whose results are never cleared."
    )
    placeholder: str = Field(
        default=DEFAULT_PLACEHOLDER,
        min_length=1,
        max_length=500,
        description="Replacement text; {tool} and {tokens} become the tool name and the cleared tokens.",
    )


class EditRules(StrictModel):
    """Which edits to apply."""

    drop_pleasantries: bool = Field(
        default=True, description="Drop thanks/greetings/acknowledgements with no content."
    )
    dedupe: bool = Field(
        default=True, description="Drop exact and near-duplicate messages, keeping the latest one."
    )
    near_duplicate_threshold: float = Field(
        default=0.9,
        ge=0.5,
        le=1.0,
        description="Similarity (character-bigram Dice) at or above which two messages are duplicates.",
    )
    clear_tool_results: Annotated[ClearToolResults | None, BeforeValidator(parse_json_object_or_null)] = Field(
        default=None, description="Clear old tool results; null (the default) keeps them."
    )
    max_tool_result_tokens: int | None = Field(
        default=400,
        ge=16,
        le=1_000_000,
        description="Shrink tool results above this many tokens (JSON to its key fields); null: never.",
    )
    redact_pii: bool = Field(
        default=False,
        description="Mask phone, ID-card and bank-card numbers and e-mails in content, name, meta and tool-call "
                    "arguments.",
    )


class Edit(StrictModel):
    """One edit, for the audit trail."""

    index: int = Field(description="Index of the edited message in the input list.")
    action: EditAction
    reason: str = Field(description="What was done and why, in one sentence.")
    tokens_saved: int = Field(description="Tokens saved by this edit (negative if a mask cost tokens).")


@dataclass
class _Work:
    """The message list being edited and what has been done to it."""

    messages: list[Message]
    tokenizer: Tokenizer
    editable_end: int
    latest_user: int | None
    dropped: set[int] = field(default_factory=set)
    edits: list[Edit] = field(default_factory=list)

    def replace(self, index: int, content: str, action: EditAction, reason: str) -> None:
        """Set a message's content and record the edit."""
        before = self.tokenizer.count_message(self.messages[index])
        self.messages[index] = self.messages[index].model_copy(update={"content": content})
        saved = before - self.tokenizer.count_message(self.messages[index])
        self.edits.append(Edit(index=index, action=action, reason=reason, tokens_saved=saved))

    def drop(self, index: int, action: EditAction, reason: str) -> None:
        """Drop a message and record the edit."""
        self.dropped.add(index)
        saved = self.tokenizer.count_message(self.messages[index])
        self.edits.append(Edit(index=index, action=action, reason=reason, tokens_saved=saved))

    def droppable(self, index: int) -> bool:
        """Return True for unprotected user/assistant text, except tool calls and the latest user message."""
        message = self.messages[index]
        return (
            index < self.editable_end
            and index != self.latest_user
            and index not in self.dropped
            and message.role in ("user", "assistant")
            and not message.tool_calls
        )


def edit_messages(messages: list[Message], rules: EditRules, protect_last: int,
                  tokenizer: Tokenizer) -> tuple[list[Message], list[Edit]]:
    """Apply the rules in order (redact, drop pleasantries, dedupe, clear and shrink tool results); return the
    kept messages and the edits, by index in the input."""
    user_indices = [i for i, message in enumerate(messages) if message.role == "user"]
    work = _Work(
        messages=list(messages),
        tokenizer=tokenizer,
        editable_end=protected_start(messages, protect_last),
        latest_user=user_indices[-1] if user_indices else None,
    )
    if rules.redact_pii:
        _redact(work)
    if rules.drop_pleasantries:
        _drop_pleasantries(work)
    if rules.dedupe:
        _dedupe(work, rules.near_duplicate_threshold)
    cleared = _clear_tool_results(work, rules.clear_tool_results) if rules.clear_tool_results else set()
    if rules.max_tool_result_tokens is not None:
        _shrink_tool_results(work, rules.max_tool_result_tokens, skip=cleared)
    kept = [message for i, message in enumerate(work.messages) if i not in work.dropped]
    return kept, sorted(work.edits, key=lambda edit: edit.index)


def _quote(text: str, limit: int = 24) -> str:
    """Return a short one-line quote of text for a reason sentence."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def _redact(work: _Work) -> None:
    """Mask personal data in every unprotected message: content, name, meta and tool-call arguments."""
    for index in range(work.editable_end):
        message = work.messages[index]
        redacted, count = redact_message(message)
        if count:
            texts = [message.content, message.name or "", json.dumps(message.meta, ensure_ascii=False),
                     json.dumps(message.tool_calls or [], ensure_ascii=False)]
            kinds = ", ".join(sorted({kind for text in texts for kind, _ in find_pii(text)}))
            reason = f"Masked {count} personal data item(s) ({kinds})."
            before = work.tokenizer.count_message(message)
            work.messages[index] = redacted
            saved = before - work.tokenizer.count_message(redacted)
            work.edits.append(Edit(index=index, action="redact_pii", reason=reason, tokens_saved=saved))


def redact_message(message: Message) -> tuple[Message, int]:
    """Return the message with personal data masked everywhere a caller can put text, and the count.

    Tool-call ids and function names are left alone: they pair a call with its result and name no one.
    """
    content, total = redact_pii(message.content)
    update: dict[str, Any] = {"content": content}
    if message.name:
        update["name"], count = redact_pii(message.name)
        total += count
    if message.meta:
        update["meta"], count = redact_value(message.meta)
        total += count
    if message.tool_calls:
        calls = [_redact_call(call) for call in message.tool_calls]
        update["tool_calls"] = [call for call, _ in calls]
        total += sum(count for _, count in calls)
    return (message.model_copy(update=update), total) if total else (message, 0)


def _redact_call(call: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Mask one OpenAI-shape tool call: its arguments (JSON kept valid) and any extra fields."""
    result: dict[str, Any] = {}
    total = 0
    for key, value in call.items():
        if key in ("id", "type"):
            result[key] = value
        elif key == "function" and isinstance(value, dict):
            function = dict(value)
            for field_name, item in value.items():
                if field_name == "name":
                    continue
                if field_name == "arguments" and isinstance(item, str):
                    function[field_name], count = redact_json_text(item)
                else:
                    function[field_name], count = redact_value(item)
                total += count
            result[key] = function
        else:
            result[key], count = redact_value(value)
            total += count
    return result, total


def _drop_pleasantries(work: _Work) -> None:
    """Drop messages that are only thanks, greetings or acknowledgements."""
    for index, message in enumerate(work.messages):
        if work.droppable(index) and is_pleasantry(message.content):
            what = f'"{_quote(message.content)}"' if message.content.strip() else "an empty message"
            work.drop(
                index, "drop_pleasantry", f"Dropped {message.role} pleasantry {what}: it carries no content."
            )


def _dedupe(work: _Work, threshold: float) -> None:
    """Drop messages repeated later by the same speaker, keeping the latest (freshest) occurrence."""
    candidates = [
        i
        for i, m in enumerate(work.messages)
        if m.role in ("user", "assistant") and not m.tool_calls and i not in work.dropped
    ]
    sets = [shingles(work.messages[i].content) for i in candidates]
    index = PrefixFilter(sets, threshold)
    for position, message_index in enumerate(candidates):
        if not work.droppable(message_index):
            continue
        later = _later_duplicate(work, position, candidates, sets, index.later(position), threshold)
        if later is not None:
            score = shingle_similarity(sets[position], sets[later])
            role = work.messages[message_index].role
            reason = f"Dropped a {role} message repeated by message {candidates[later]} (similarity {score:.2f})."
            work.drop(message_index, "dedupe", reason)


# Near-duplicates whose key numbers differ ("订单 ORD-1 已发货" … "ORD-2") are not duplicates; a list of many such
# messages could still make each one test every later one. Past this many tests a message is simply kept.
MAX_DUPLICATE_TESTS = 64


def _later_duplicate(work: _Work, position: int, candidates: list[int], sets: list[frozenset[str]],
                     later: Iterator[int], threshold: float) -> int | None:
    """Return the position (in candidates) of the first later message that duplicates this one, or None."""
    message = work.messages[candidates[position]]
    tests = 0
    for other in later:
        candidate = work.messages[candidates[other]]
        if candidates[other] in work.dropped or candidate.role != message.role or candidate.name != message.name:
            continue
        if candidate.content.strip() == message.content.strip():
            return other
        if not can_reach(sets[position], sets[other], threshold):
            continue
        tests += 1
        if tests > MAX_DUPLICATE_TESTS:
            return None
        if shingle_similarity(sets[position], sets[other]) >= threshold and _numbers_kept(
            message.content, candidate.content
        ):
            return other
    return None


def _numbers_kept(earlier: str, later: str) -> bool:
    """Return True when every key number of earlier is in later ("ORD-1" and "ORD-2" are no duplicates)."""
    return all(value_present(number.value, later) for number in extract_key_numbers(earlier))


def tool_names(messages: list[Message]) -> dict[int, str]:
    """Return the tool name of every tool message, from its assistant tool_call or its own name."""
    by_call_id: dict[str, str] = {}
    names: dict[int, str] = {}
    for index, message in enumerate(messages):
        for call in message.tool_calls or []:
            raw = call.get("function")
            function: dict[str, Any] = raw if isinstance(raw, dict) else {}
            if call.get("id") and function.get("name"):
                by_call_id[str(call["id"])] = str(function["name"])
        if message.role == "tool":
            names[index] = by_call_id.get(message.tool_call_id or "") or message.name or "tool"
    return names


def _clear_tool_results(work: _Work, rule: ClearToolResults) -> set[int]:
    """Replace all but the most recent tool results by the placeholder; return the cleared indices."""
    names = tool_names(work.messages)
    indices = sorted(names)
    total = sum(work.tokenizer.count(work.messages[i].content) for i in indices)
    if total <= rule.trigger_tokens:
        return set()
    recent = set(indices[len(indices) - rule.keep :]) if rule.keep else set()
    cleared = set()
    for index in indices:
        if index in recent or index >= work.editable_end or names[index] in rule.exclude_tools:
            continue
        tokens = work.tokenizer.count(work.messages[index].content)
        placeholder = rule.placeholder.replace("{tool}", names[index]).replace("{tokens}", str(tokens))
        # A placeholder longer than the result would cost tokens instead of saving them.
        if work.tokenizer.count(placeholder) < tokens:
            reason = f"Cleared an old result of {names[index]} ({tokens} tokens); kept the newest {rule.keep}."
            work.replace(index, placeholder, "clear_tool_result", reason)
            cleared.add(index)
    return cleared


def _shrink_tool_results(work: _Work, max_tokens: int, skip: set[int]) -> None:
    """Shrink unprotected tool results above max_tokens: JSON to its key fields, text by truncation."""
    names = tool_names(work.messages)
    for index, name in names.items():
        content = work.messages[index].content
        before = work.tokenizer.count(content)
        if index in skip or index >= work.editable_end or before <= max_tokens:
            continue
        shrunk, how = shrink_tool_content(content, max_tokens, work.tokenizer)
        after = work.tokenizer.count(shrunk)
        if after < before:
            reason = f"Shrank the result of {name} from {before} to {after} tokens ({how})."
            work.replace(index, shrunk, "shrink_tool_result", reason)


def shrink_tool_content(content: str, max_tokens: int, tokenizer: Tokenizer) -> tuple[str, str]:
    """Return content cut to at most max_tokens tokens and how it was cut."""
    try:
        value = json.loads(content)
    except ValueError:
        value = None
    if isinstance(value, (dict, list)):
        compact = json.dumps(shrink_json(value), ensure_ascii=False, separators=(",", ":"))
        if compact not in ("{}", "[]"):
            if tokenizer.count(compact) <= max_tokens:
                return compact, "kept IDs, numbers and statuses of the JSON"
            return tokenizer.truncate(
                compact, max_tokens
            ), "kept IDs, numbers and statuses of the JSON, then truncated"
    return tokenizer.truncate(content, max_tokens), "truncated the text"


_STATUS_KEYS = frozenset(
    {
        "status",
        "state",
        "error",
        "errors",
        "err",
        "errmsg",
        "errcode",
        "message",
        "msg",
        "code",
        "result",
        "success",
        "ok",
        "reason",
        "detail",
        "name",
        "title",
    }
)
_ID_KEY_ENDINGS = ("id", "no", "number", "code")
LONG_LIST_ITEMS = 3
MAX_DEPTH = 6
MAX_KEPT_STRING_CHARS = 200
_SHORT_VALUE_CHARS = 64
_SKIP = object()


def shrink_json(value: Any, depth: int = 0) -> Any:
    """Return value cut to its informative parts (IDs, numbers, statuses, errors); long lists summarised."""
    if depth >= MAX_DEPTH:
        return "…"
    if isinstance(value, dict):
        return _shrink_dict(value, depth)
    if isinstance(value, list):
        if len(value) > LONG_LIST_ITEMS:
            return {"_summary": f"{len(value)} items", "first": shrink_json(value[0], depth + 1)}
        return [shrink_json(item, depth + 1) for item in value]
    if isinstance(value, str):
        return value[:MAX_KEPT_STRING_CHARS]
    return value


def _shrink_dict(value: dict[str, Any], depth: int) -> dict[str, Any]:
    """Return the informative entries of a JSON object."""
    kept: dict[str, Any] = {}
    for key, item in value.items():
        shrunk = _shrink_entry(str(key), item, depth)
        if shrunk is not _SKIP:
            kept[key] = shrunk
    return kept


def _informative_key(key: str) -> bool:
    """Return True for keys naming an ID, a status or an error."""
    lowered = key.lower()
    return lowered in _STATUS_KEYS or lowered.endswith(_ID_KEY_ENDINGS) or "error" in lowered


def _shrink_entry(key: str, item: Any, depth: int) -> Any:
    """Return the shrunk value of one entry, or _SKIP when it carries nothing worth keeping."""
    if isinstance(item, (bool, int, float)) or item is None:
        return item if (item is not None or _informative_key(key)) else _SKIP
    if isinstance(item, (dict, list)):
        shrunk = shrink_json(item, depth + 1)
        return shrunk if shrunk not in ({}, []) else _SKIP
    text = str(item)
    if _informative_key(key):
        return text[:MAX_KEPT_STRING_CHARS]
    # Short strings holding a date, amount or code ("2025-03-17", "¥239") matter as much as numbers.
    if len(text) <= _SHORT_VALUE_CHARS and any(n.kind != "number" for n in extract_key_numbers(text)):
        return text
    return _SKIP
