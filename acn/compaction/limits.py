"""Bounds on compaction work: how much one request may compact (how many run at once: services.slots)."""

from __future__ import annotations

from acn.common.errors import TooMuchWorkError
from acn.common.models import Message


def message_chars(messages: list[Message]) -> int:
    """Return the characters of message text compaction reads (tool calls are archived, not compacted)."""
    return sum(len(message.content) for message in messages)


def check_work(messages: list[Message], *, max_messages: int, max_chars: int, field: str = "messages") -> None:
    """Refuse (422 too_much_work) messages that are more than one request may have compacted.

    Compaction is linear in its input, but a request must stay a bounded amount of CPU: beyond the cap a caller
    splits its history (or records it turn by turn, which compacts as it goes).
    """
    problems = []
    if len(messages) > max_messages:
        problems.append(f"{field}: {len(messages)} messages is more than one request may compact ({max_messages}, "
                        "ACN_MAX_COMPACT_MESSAGES); send fewer at a time")
    chars = message_chars(messages)
    if chars > max_chars:
        problems.append(f"{field}: {chars} characters of text is more than one request may compact ({max_chars}, "
                        "ACN_MAX_COMPACT_CHARS); send fewer at a time")
    if problems:
        raise TooMuchWorkError("; ".join(problems), problems)
