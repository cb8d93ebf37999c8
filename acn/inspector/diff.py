"""What changed in a session's working state between two kept versions."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

from acn.common.models import Message, Namespace, Segment
from acn.nodes.sessions import SessionStateRequest, SessionStateResponse, run_state
from acn.services.deps import Deps


@dataclass(frozen=True)
class VersionDiff:
    """Two versions side by side: turns, segments, buffer, key numbers and the summary text."""

    old: SessionStateResponse
    new: SessionStateResponse
    segments_added: list[Segment]
    segments_removed: list[Segment]
    buffer_added: list[Message]
    buffer_removed: list[Message]
    numbers_added: list[tuple[str, str]]
    numbers_removed: list[tuple[str, str]]
    summary_diff: list[str]

    @property
    def empty(self) -> bool:
        return not (self.segments_added or self.segments_removed or self.buffer_added or self.buffer_removed
                    or self.summary_diff or self.old.turn != self.new.turn)


def version_diff(namespace: Namespace, old_version: int, new_version: int, deps: Deps) -> VersionDiff:
    """Read both versions through session_state and compare them; a pruned version is a 404."""
    old = run_state(SessionStateRequest(**namespace.model_dump(), version=old_version), deps)
    new = run_state(SessionStateRequest(**namespace.model_dump(), version=new_version), deps)
    old_ids = {s.id for s in old.segments}
    new_ids = {s.id for s in new.segments}
    old_buffer = {_message_key(m) for m in old.buffer}
    new_buffer = {_message_key(m) for m in new.buffer}
    old_numbers = _numbers(old.segments)
    new_numbers = _numbers(new.segments)
    summary = list(difflib.unified_diff(old.working_summary.splitlines(), new.working_summary.splitlines(),
                                        f"v{old_version}", f"v{new_version}", lineterm="", n=1))
    return VersionDiff(
        old=old, new=new,
        segments_added=[s for s in new.segments if s.id not in old_ids],
        segments_removed=[s for s in old.segments if s.id not in new_ids],
        buffer_added=[m for m in new.buffer if _message_key(m) not in old_buffer],
        buffer_removed=[m for m in old.buffer if _message_key(m) not in new_buffer],
        numbers_added=sorted(new_numbers - old_numbers), numbers_removed=sorted(old_numbers - new_numbers),
        summary_diff=summary,
    )


def _message_key(message: Message) -> tuple[int | None, str, str]:
    return (message.turn, message.role, message.content)


def _numbers(segments: list[Segment]) -> set[tuple[str, str]]:
    return {(label, value) for segment in segments for label, value in segment.key_numbers.items()}
