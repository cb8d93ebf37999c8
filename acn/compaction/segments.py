"""Cut turns into segments (what a turn is: common.conversation)."""

from __future__ import annotations

import hashlib
import json

from acn.common.conversation import Turn
from acn.common.models import Segment
from acn.text.sentences import split_sentences


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
