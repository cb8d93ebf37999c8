"""Session nodes: read the working state, list its versions, roll back to one."""

from __future__ import annotations

from pydantic import Field

from acn.common.conversation import SessionState, VersionInfo
from acn.common.models import MAX_VERSION, Message, Namespace, NodeResponse, Segment
from acn.compaction.segment_lines import render_working_summary
from acn.nodes.spec import Description, NodeSpec
from acn.services.deps import Deps
from acn.storage.repositories import QUERY_WINDOW


class SessionStateRequest(Namespace):
    """Which session, and optionally which version (default: the latest)."""

    version: int | None = Field(default=None, ge=1, le=MAX_VERSION, description="A kept version; default the latest.")


class SessionStateResponse(NodeResponse):
    version: int
    turn: int
    buffer: list[Message]
    segments: list[Segment]
    working_summary: str
    reason: str
    created_at: int


class SessionVersionsResponse(NodeResponse):
    versions: list[VersionInfo]
    latest: int


class SessionRollbackRequest(Namespace):
    """Make an earlier version the current state again (as a new version: history is never rewritten)."""

    version: int = Field(ge=1, le=MAX_VERSION, description="The version to restore.")
    expected_version: int | None = Field(default=None, ge=0, le=MAX_VERSION, description="409 if the session moved on.")


def state_response(state: SessionState) -> SessionStateResponse:
    return SessionStateResponse(version=state.version, turn=state.turn, buffer=state.buffer, segments=state.segments,
                                working_summary=render_working_summary(state.segments), reason=state.reason,
                                created_at=state.created_at)


def run_state(request: SessionStateRequest, deps: Deps) -> SessionStateResponse:
    """Return the session's working state at a version."""
    sessions = deps.sessions
    if request.version is None:
        return state_response(sessions.head(deps.tenant, request))
    return state_response(sessions.read(deps.tenant, request, request.version))


def run_versions(request: Namespace, deps: Deps) -> SessionVersionsResponse:
    """Return the kept versions of a session, oldest first."""
    sessions = deps.sessions
    versions = sessions.versions(deps.tenant, request)
    return SessionVersionsResponse(versions=versions, latest=versions[-1].version if versions else 0)


def run_rollback(request: SessionRollbackRequest, deps: Deps) -> SessionStateResponse:
    """Commit the chosen version's state as the newest version."""
    sessions = deps.sessions
    with sessions.locked(deps.tenant, request):
        chosen = sessions.read(deps.tenant, request, request.version)
        saved = sessions.commit(deps.tenant, request, chosen, reason=f"rollback to v{request.version}",
                                expected_version=request.expected_version)
        retire_rolled_back_turns(deps, request, chosen.turn, saved.version)
    return state_response(saved)


def retire_rolled_back_turns(deps: Deps, namespace: Namespace, last_turn: int, version: int) -> int:
    """Mark what the session stored from turns after last_turn as no longer current; return how many rows.

    After a rollback the next turns reuse those numbers, and retrieval must not serve what a rolled-back turn
    said (its archived messages, the memories extracted from it). The rows are kept, not deleted (nothing
    stored is lost; the old versions still reference them): they get valid_to (retrieval and neighbours read
    live rows only) and meta.rolled_back = the version the rollback made; a memory one of them superseded is
    current again. Not undone: a rolled-back turn's merge into an older memory (dedupe update), and rolling
    forward again to a version that held those turns does not revive them in retrieval (its buffer shows them).
    """
    memories = deps.memory_repository
    if memories is None:
        return 0
    rows = memories.queries.rolled_back_after(deps.tenant, namespace, last_turn, limit=QUERY_WINDOW)
    if not rows:
        return 0
    now = memories.now_ms(deps.tenant, namespace)
    retired = [row.model_copy(update={"valid_to": now, "meta": {**row.meta, "rolled_back": version}}) for row in rows]
    # What a retired memory superseded is current again (a decision changed in an undone turn stands as it was).
    ids = {row.id for row in rows}
    closed = memories.queries.closed_by(deps.tenant, namespace, sorted(ids), limit=QUERY_WINDOW)
    reopened = [m.model_copy(update={"valid_to": None, "superseded_by": None, "updated_at": now})
                for m in closed if m.id not in ids]
    memories.save(deps.tenant, [*retired, *reopened])
    return len(rows)


class SessionVersionsRequest(Namespace):
    """Which session."""


NODES = (
    NodeSpec(
        name="session_state", request_model=SessionStateRequest, response_model=SessionStateResponse, run=run_state,
        summary="Read a session's working state (buffer and segments) at a version",
        description=Description(
            human_en="The session's recent turns and compacted segments, at the latest or a given version.",
            human_zh="会话的最近轮次和压缩分段，可取最新版本或指定版本。",
            llm_en="Read what the session currently holds (recent messages and summaries).",
            llm_zh="读取会话当前保存的内容（最近消息和摘要）。"),
    ),
    NodeSpec(
        name="session_versions", request_model=SessionVersionsRequest, response_model=SessionVersionsResponse,
        run=run_versions, summary="List the kept versions of a session's working state",
        description=Description(
            human_en="Every change of the working state is a version: when, why, how many turns and segments.",
            human_zh="工作状态的每次变更都是一个版本：时间、原因、轮次数和分段数。",
            llm_en="List the saved versions of this session's state, for rollback.",
            llm_zh="列出本会话状态的已保存版本，用于回滚。"),
    ),
    NodeSpec(
        name="session_rollback", request_model=SessionRollbackRequest, response_model=SessionStateResponse,
        run=run_rollback, summary="Roll a session's working state back to an earlier version",
        description=Description(
            human_en="Restore the buffer and segments of an earlier version as a new version (a checkpoint "
                     "reload). Memories written since stay; delete them separately if needed.",
            human_zh="把某个早期版本的缓冲区和分段恢复为新版本（读档）。期间写入的记忆保留，如需删除请单独操作。",
            llm_en="Go back to an earlier checkpoint of the session's state.",
            llm_zh="回到会话状态的某个早期检查点。"),
    ),
)
