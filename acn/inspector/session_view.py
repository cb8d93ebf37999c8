"""The session page's data: turns, segments over their ranges, versions and memories, read through the nodes."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from acn.assembly.recall import readable
from acn.common.conversation import VersionInfo
from acn.common.models import Memory, Namespace, Segment, meta_int
from acn.nodes.memory_admin import PAGE_LIMIT, MemoryListRequest, list_memories
from acn.nodes.sessions import (
    SessionStateRequest,
    SessionStateResponse,
    SessionVersionsRequest,
    run_state,
    run_versions,
)
from acn.services.deps import Deps

# list_memories refuses offsets beyond this; a session with more rows shows the first ones and says so.
MAX_OFFSET = 15_000
PREVIEW_CHARS = 80
# Turns the timeline draws at once: the page costs the same whatever turn numbers are stored (a number a client
# sent once, 10^9, drew 10^9 cells: gigabytes, and a server killed for memory fails every tenant).
TURN_WINDOW = 200


@dataclass(frozen=True)
class ArchivedMessage:
    """One archived message of a turn, its pieces joined back together."""

    role: str
    content: str
    name: str | None = None


@dataclass
class TurnView:
    """One turn: its archived messages, the memories stated in it, and where the working state keeps it."""

    number: int
    messages: list[ArchivedMessage] = field(default_factory=list)
    memories: list[Memory] = field(default_factory=list)
    segment_id: str | None = None
    in_buffer: bool = False

    @property
    def status(self) -> str:
        """Return segment, buffer or archived: what carries this turn in the working state."""
        return "segment" if self.segment_id else "buffer" if self.in_buffer else "archived"

    @property
    def preview(self) -> str:
        text = next((m.content for m in self.messages if m.role == "user"), "")
        return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "…"


@dataclass
class SegmentView:
    """A segment with the archived raw turns of its range."""

    segment: Segment
    first: int
    last: int
    turns: list[TurnView]


@dataclass
class MemoryRow:
    """A memory and what superseded it, in order (empty while it is current)."""

    memory: Memory
    chain: list[Memory]


@dataclass(frozen=True)
class TurnWindow:
    """The turns the timeline draws: [first, last] of the session's 1..count, at most TURN_WINDOW of them."""

    first: int
    last: int
    count: int

    @property
    def earlier(self) -> int | None:
        """Return the first turn of the window before this one (None: this is the first)."""
        return max(1, self.first - TURN_WINDOW) if self.first > 1 else None

    @property
    def later(self) -> int | None:
        """Return the first turn of the window after this one (None: this is the last)."""
        return self.last + 1 if self.last < self.count else None

    def column(self, turn: int) -> int:
        """Return the timeline grid column of a turn, clipped to the window (1 .. width + 1)."""
        return min(max(turn, self.first), self.last + 1) - self.first + 1


def turn_window(count: int, start: int | None) -> TurnWindow:
    """Return the window starting at `start` (default: the latest turns), within 1..count."""
    if count < 1:
        return TurnWindow(first=1, last=0, count=0)
    first = max(1, count - TURN_WINDOW + 1) if start is None else min(max(start, 1), count)
    return TurnWindow(first=first, last=min(count, first + TURN_WINDOW - 1), count=count)


@dataclass
class SessionPage:
    namespace: Namespace
    state: SessionStateResponse
    versions: list[VersionInfo]
    turns: list[TurnView]
    segments: list[SegmentView]
    buffer_range: tuple[int, int] | None
    memories: list[MemoryRow]
    truncated: bool
    window: TurnWindow
    # The memories of this conversation's users written in their other conversations: this one reads them too.
    user_memories: list[Memory] = field(default_factory=list)


    @property
    def latest(self) -> int:
        return self.versions[-1].version if self.versions else 0


def session_page(namespace: Namespace, deps: Deps, turns_from: int | None = None) -> SessionPage:
    """Return everything the session page shows, read through the session and memory nodes; the timeline holds
    the TURN_WINDOW turns from `turns_from` (default: the latest)."""
    request = SessionStateRequest(**namespace.model_dump())
    state = run_state(request, deps)
    versions = run_versions(SessionVersionsRequest(**namespace.model_dump()), deps).versions
    memories, truncated = all_memories(namespace, deps)
    window = turn_window(last_turn(state, memories), turns_from)
    turns = turn_views(state, memories, window)
    segments = [SegmentView(segment=s, first=s.turn_range[0], last=s.turn_range[-1],
                            turns=[t for t in turns if s.turn_range[0] <= t.number <= s.turn_range[-1]])
                for s in state.segments]
    buffered = sorted({m.turn for m in state.buffer if m.turn is not None})
    return SessionPage(namespace=namespace, state=state, versions=versions, turns=turns, segments=segments,
                       buffer_range=(buffered[0], buffered[-1]) if buffered else None,
                       memories=memory_rows([m for m in memories if m.kind != "turn"]) + memory_rows(
                           [m for m in memories if m.kind == "turn"]), truncated=truncated, window=window,
                       user_memories=users_memories(namespace, memories, deps))


def users_memories(namespace: Namespace, memories: list[Memory], deps: Deps) -> list[Memory]:
    """Return the user-scope memories (live ones) that the users of this conversation wrote in their other
    conversations of the agent: the page shows what crosses into this one (one page each, oldest first)."""
    found: list[Memory] = []
    for user in sorted({m.user_id for m in memories if m.user_id}):
        page = list_memories(MemoryListRequest(agent_id=namespace.agent_id, user_id=user, scope="user",
                                               limit=PAGE_LIMIT), deps)
        found += [m for m in page.memories if m.session_id != namespace.session_id]
    return found


def last_turn(state: SessionStateResponse, memories: list[Memory]) -> int:
    """Return the highest turn number the session's state or archive rows know of."""
    return max([state.turn, *(m.turn_range[0] for m in memories if m.kind == "turn" and m.turn_range)], default=0)


def all_memories(namespace: Namespace, deps: Deps) -> tuple[list[Memory], bool]:
    """Return every memory of the session, page by page through list_memories; True when cut short."""
    found: list[Memory] = []
    offset: int | None = 0
    while offset is not None and offset <= MAX_OFFSET:
        page = list_memories(MemoryListRequest(agent_id=namespace.agent_id, session_id=namespace.session_id,
                                               limit=PAGE_LIMIT, offset=offset), deps)
        found += page.memories
        offset = page.next_offset
    return found, offset is not None


def turn_views(state: SessionStateResponse, memories: list[Memory], window: TurnWindow) -> list[TurnView]:
    """Return the window's turns, each with its archived messages, memories and what carries it now."""
    archived = [m for m in memories if m.kind == "turn" and m.turn_range
                and window.first <= m.turn_range[0] <= window.last]
    turns = {number: TurnView(number) for number in range(window.first, window.last + 1)}
    for number, messages in archived_messages(archived).items():
        if number in turns:
            turns[number].messages = messages
    for memory in memories:
        if memory.kind != "turn" and memory.turn_range and memory.turn_range[0] in turns:
            turns[memory.turn_range[0]].memories.append(memory)
    buffered = {m.turn for m in state.buffer}
    for turn in turns.values():
        turn.in_buffer = turn.number in buffered
        turn.segment_id = next((s.id for s in state.segments
                                if s.turn_range[0] <= turn.number <= s.turn_range[-1]), None)
    return list(turns.values())


def archived_messages(rows: list[Memory]) -> dict[int, list[ArchivedMessage]]:
    """Return each turn's messages from its `turn` rows, long messages' pieces joined in order."""
    pieces: dict[tuple[int, int], list[Memory]] = defaultdict(list)
    # A row whose stored position is not an integer (written before requests were checked) is logged and left
    # out: the page shows the rest of the session instead of a 500.
    for row in readable(rows):
        number = row.turn_range[0] if row.turn_range else 0
        pieces[(number, meta_int(row.meta, "message_index") or 0)].append(row)
    turns: dict[int, list[ArchivedMessage]] = defaultdict(list)
    for (number, _index), parts in sorted(pieces.items()):
        parts.sort(key=lambda row: meta_int(row.meta, "part") or 0)
        meta = parts[0].meta
        turns[number].append(ArchivedMessage(role=str(meta.get("role", "")),
                                             content="".join(p.content for p in parts),
                                             name=meta.get("name")))
    return turns


def memory_rows(memories: list[Memory]) -> list[MemoryRow]:
    """Return the memories oldest first, each with the chain of memories that superseded it."""
    by_id = {m.id: m for m in memories}
    rows = []
    for memory in memories:
        chain: list[Memory] = []
        next_id = memory.superseded_by
        while next_id and next_id in by_id and len(chain) < len(memories):
            chain.append(by_id[next_id])
            next_id = by_id[next_id].superseded_by
        rows.append(MemoryRow(memory=memory, chain=chain))
    return rows
