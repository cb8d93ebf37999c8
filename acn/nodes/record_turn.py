"""record_turn: append a turn, archive it verbatim, edit the buffer, extract memories, compact if due.

The pipeline is acn/recording/record_turn.py (the Dify external-memory node records through it too).
"""

from __future__ import annotations

from acn.common.errors import PackError
from acn.nodes.spec import Description, NodeSpec
from acn.recording.record_turn import RecordTurnRequest, RecordTurnResponse, record
from acn.services.deps import Deps


def run(request: RecordTurnRequest, deps: Deps) -> RecordTurnResponse:
    """Record one turn under the session lock; a stale expected_version changes nothing (409)."""
    recorded = record(request, deps)
    if recorded is None:  # only a call with an event id skips; this one has none
        raise PackError("record_turn recorded nothing")
    return recorded


NODE = NodeSpec(
    name="record_turn",
    request_model=RecordTurnRequest,
    response_model=RecordTurnResponse,
    run=run,
    summary="Record a turn: archive, edit, extract memories, compact when due",
    description=Description(
        human_en="The one-call convenience after each model reply: appends the turn to the session, archives it "
                 "verbatim, edits the buffer, writes memory events and compacts when the trigger is reached. "
                 "A minimal chat loop is assemble → LLM → record_turn.",
        human_zh="每轮模型回复后调用一次：把本轮追加到会话、原文归档、编辑缓冲区、写入记忆事件，达到阈值时自动压缩。"
                 "最小对话循环：assemble → LLM → record_turn。",
        llm_en="Save this turn's user, assistant and tool messages so later turns remember them.",
        llm_zh="保存本轮的用户、助手和工具消息，让之后的轮次记得它们。",
    ),
)
