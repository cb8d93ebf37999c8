"""Assemble: layered context under a hard token budget (the pipeline is acn/assembly/assemble.py)."""

from __future__ import annotations

from acn.assembly.assemble import assemble
from acn.assembly.models import AssembleRequest, AssembleResponse
from acn.common import degraded
from acn.nodes.spec import Description, NodeSpec
from acn.services.deps import Deps


def run(request: AssembleRequest, deps: Deps) -> AssembleResponse:
    """Assemble the context for one model call, saying which providers it went without."""
    with degraded.collecting() as notes:
        result = assemble(request, deps)
    return result.model_copy(update={"degraded": dict(notes)}) if notes else result


NODE = NodeSpec(
    name="assemble",
    request_model=AssembleRequest,
    response_model=AssembleResponse,
    run=run,
    summary="Assemble a layered context under a hard token budget",
    description=Description(
        human_en="Build the context for the next model call: identity, retrieved memory (tagged), working state, "
                 "recent turns and the user input, within max_tokens. Modes: snapshot, focused, streaming, auto.",
        human_zh="为下一次模型调用组装上下文：身份、检索到的记忆（带来源）、工作状态、最近轮次和用户输入，总量不超过 "
                 "max_tokens。模式：快照、聚焦、流式、自动。",
        llm_en="Get the messages (or a single prompt) to send to the model for this turn, with the earlier "
               "facts that matter already included and the token budget respected.",
        llm_zh="获取本轮要发给模型的 messages（或单个 prompt），其中已包含相关的早期事实，且不超出 token 预算。",
    ),
)
