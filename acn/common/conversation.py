"""The conversation's shapes, said once: what a turn is, how messages are numbered into turns, session state.

A user message opens the next turn and every other message joins the turn it follows. A session numbers its turns
one by one (record_turn: a client's `turn` may repeat the server's number, never run ahead of it); messages given
without a session (compact's `messages`) may carry their own numbers, taken when ahead. record_turn numbers incoming
messages by this rule, compaction and assembly group a buffer by it, the archive stores turns, and the edit rules
protect the last few of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import Field

from acn.common.models import Message, Segment, StrictModel


@dataclass
class Turn:
    """A user message and everything that follows it until the next user message."""

    number: int
    messages: list[Message] = field(default_factory=list)

    @property
    def text(self) -> str:
        """Return the turn's message contents joined by newlines."""
        return "\n".join(message.content for message in self.messages if message.content)


def opens_turn(message: Message, in_turn: bool) -> bool:
    """Return True when message starts a new turn: a user message, or any first message of a conversation."""
    return message.role == "user" or not in_turn


def following_turn(previous: int, message: Message) -> int:
    """Return the number of the turn message opens after turn `previous`: the next one, or its own if ahead."""
    return max(previous + 1, message.turn or 0)


def number_messages(messages: list[Message], last_turn: int) -> list[tuple[int, Message]]:
    """Return each message with the number of the session turn it belongs to, continuing after `last_turn`.

    A session numbers its own turns one by one: a client's `turn` is not taken here (record_turn refuses one that
    runs ahead, `turn_ahead`), so one message cannot push every later turn of the session to 10^9.
    """
    turn = max(last_turn, 0)
    numbered = []
    for message in messages:
        if opens_turn(message, turn > 0):
            turn += 1
        numbered.append((turn, message))
    return numbered


def group_turns(messages: list[Message], first_turn: int = 1) -> list[Turn]:
    """Group messages into turns; a turn's number is its user message's `turn`, else the next free one.

    System messages are instructions, not conversation, so they never enter a turn. Messages before
    the first user message (an assistant greeting) open a turn of their own.
    """
    turns: list[Turn] = []
    for message in messages:
        if message.role == "system":
            continue
        if opens_turn(message, bool(turns)):
            turns.append(Turn(number=_turn_number(message, turns, first_turn)))
        turns[-1].messages.append(message)
    return turns


def _turn_number(message: Message, turns: list[Turn], first_turn: int) -> int:
    if not turns:  # the first turn takes the client's number as given, else the first free one
        return message.turn if message.turn is not None else first_turn
    return following_turn(turns[-1].number, message)


def protected_start(messages: list[Message], protect_last: int) -> int:
    """Return the index where the last protect_last turns begin (len(messages) when nothing is protected)."""
    starts = [i for i, message in enumerate(messages) if message.role == "user"]
    if protect_last == 0 or not starts:
        return len(messages)
    return starts[-protect_last] if len(starts) >= protect_last else starts[0]


# A redelivery comes within seconds of the first attempt (Dify retries a run's callback, serialized per run):
# remembering the last few hundred delivery ids per session covers it without growing the snapshot forever.
OBSERVED_EVENTS_KEPT = 256


class SessionState(StrictModel):
    """The working state of one session at one version."""

    version: int = 0
    turn: int = Field(default=0, description="Number of the last recorded turn.")
    buffer: list[Message] = Field(default_factory=list, description="Recent turns not yet compacted, verbatim.")
    segments: list[Segment] = Field(default_factory=list, description="Compacted working state, oldest first.")
    archived_turn: int = Field(default=0, description="Raw messages of turns up to this one are archived.")
    reason: str = Field(default="", description="What produced this version.")
    created_at: int = 0
    observed_events: list[str] = Field(
        default_factory=list, description="Delivery ids of the last external events recorded (Dify's external "
        "memory observe), so a redelivered event is stored once; the newest OBSERVED_EVENTS_KEPT.")


# One stored version of a session's state, as the version list shows it (no docstring: it would become the
# schema's description, and the published schemas stay as they were).
class VersionInfo(StrictModel):
    version: int
    created_at: int
    reason: str
    turn: int
    buffer_messages: int
    segments: int
