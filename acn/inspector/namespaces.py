"""The namespace overview: agents → sessions with counts and last activity, read from the two collections."""

from __future__ import annotations

from dataclasses import dataclass, field

from acn.app.runtime import Runtime
from acn.storage.repositories import NO_TURN

# Milvus caps one query window at 16,384 rows; the overview says so when a tenant has more.
ROW_WINDOW = 16_384


@dataclass
class SessionSummary:
    """One session of an agent, as the overview lists it."""

    agent_id: str
    session_id: str
    memories: int = 0
    archived_messages: int = 0
    turns: int = 0
    version: int = 0
    last_activity: int = 0


@dataclass
class AgentSummary:
    """One agent with its sessions, most recently active first."""

    agent_id: str
    sessions: list[SessionSummary] = field(default_factory=list)

    @property
    def last_activity(self) -> int:
        return max((s.last_activity for s in self.sessions), default=0)


@dataclass
class Overview:
    agents: list[AgentSummary]
    truncated: bool


def overview(runtime: Runtime, tenant: str, query: str = "") -> Overview:
    """Return the tenant's agents and sessions (optionally only those whose ids contain `query`)."""
    rows = runtime.memories.queries.tenant_rows(tenant, ["agent_id", "session_id", "kind", "updated_at", "turn_to"],
                                        limit=ROW_WINDOW)
    heads = runtime.sessions.heads_of(tenant, limit=ROW_WINDOW)
    sessions: dict[tuple[str, str], SessionSummary] = {}
    for row in rows:
        summary = _summary(sessions, row)
        if row["kind"] == "turn":
            summary.archived_messages += 1
        else:
            summary.memories += 1
        if row["turn_to"] != NO_TURN:
            summary.turns = max(summary.turns, int(row["turn_to"]))
        summary.last_activity = max(summary.last_activity, int(row["updated_at"]))
    for head in heads:
        summary = _summary(sessions, head)
        summary.version = int(head["version"])
        summary.last_activity = max(summary.last_activity, int(head["created_at"]))
    matching = [s for s in sessions.values() if _matches(query, s)]
    return Overview(agents=_by_agent(matching), truncated=len(rows) >= ROW_WINDOW or len(heads) >= ROW_WINDOW)


def _summary(sessions: dict[tuple[str, str], SessionSummary], row: dict[str, object]) -> SessionSummary:
    key = (str(row["agent_id"]), str(row["session_id"]))
    if key not in sessions:
        sessions[key] = SessionSummary(agent_id=key[0], session_id=key[1])
    return sessions[key]


def _matches(query: str, summary: SessionSummary) -> bool:
    needle = query.strip().lower()
    return not needle or needle in summary.agent_id.lower() or needle in summary.session_id.lower()


def _by_agent(sessions: list[SessionSummary]) -> list[AgentSummary]:
    agents: dict[str, AgentSummary] = {}
    for summary in sorted(sessions, key=lambda s: -s.last_activity):
        agents.setdefault(summary.agent_id, AgentSummary(summary.agent_id)).sessions.append(summary)
    return sorted(agents.values(), key=lambda a: -a.last_activity)
