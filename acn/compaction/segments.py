"""Group messages into turns and cut turns into segments."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

from acn.common.models import Message, Segment
from acn.text.sentences import split_sentences


@dataclass
class Turn:
    """A user message and everything that follows it until the next user message."""

    number: int
    messages: list[Message] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Return the turn's message contents joined by newlines."""
        return "\n".join(message.content for message in self.messages if message.content)


def group_turns(messages: list[Message], first_turn: int = 1) -> list[Turn]:
    """Group messages into turns; a turn's number is its user message's `turn`, else the next free one.

    System messages are instructions, not conversation, so they never enter a turn. Messages before
    the first user message (an assistant greeting) open a turn of their own.
    """
    turns: list[Turn] = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "user" or not turns:
            turns.append(Turn(number=_turn_number(message, turns, first_turn)))
        turns[-1].messages.append(message)
    return turns


def _turn_number(message: Message, turns: list[Turn], first_turn: int) -> int:
    following = turns[-1].number + 1 if turns else first_turn
    if message.turn is not None and (not turns or message.turn > turns[-1].number):
        return message.turn
    return following


def user_sentences(turns: list[Turn]) -> list[str]:
    """Return the sentences of the turns' user messages."""
    return [
        sentence
        for turn in turns
        for message in turn.messages
        if message.role == "user"
        for sentence in split_sentences(message.content)
    ]


def split_recent(turns: list[Turn], keep_recent: int) -> tuple[list[Turn], list[Turn]]:
    """Split turns into (to compact, kept verbatim): the last keep_recent turns are kept."""
    if keep_recent <= 0:
        return list(turns), []
    return turns[:-keep_recent], turns[-keep_recent:]


def cut_segments(turns: list[Turn], segment_size: int) -> list[list[Turn]]:
    """Cut turns into consecutive groups of segment_size turns (the last group may be shorter)."""
    size = max(1, segment_size)
    return [turns[start : start + size] for start in range(0, len(turns), size)]


def next_turn_number(previous: list[Segment]) -> int:
    """Return the first turn number after the turns the previous segments cover."""
    return max((segment.turn_range[-1] for segment in previous if segment.turn_range), default=0) + 1


def segment_id(segment: Segment) -> str:
    """Return a deterministic id: seg-<first>-<last>-<hash of the content>."""
    content = segment.model_dump(exclude={"id", "text", "tokens"})
    digest = hashlib.sha256(
        json.dumps(content, ensure_ascii=False, sort_keys=True).encode("utf-8")
    ).hexdigest()
    first, last = (segment.turn_range + [0, 0])[:2]
    return f"seg-{first}-{last}-{digest[:8]}"
