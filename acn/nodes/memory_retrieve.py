"""MemoryRetrieve: hybrid ranking, scoped filters, limited injection with source tags."""

from __future__ import annotations

import logging

from pydantic import Field

from acn.common import degraded
from acn.common.models import NodeResponse
from acn.common.stored import memory_problem
from acn.memory.lines import render_memories
from acn.nodes.spec import Description, NodeSpec
from acn.retrieval.hybrid_rank import MemoryRetrieveRequest, RetrievedMemory, cut, rank
from acn.services.deps import Deps
from acn.text.lang import detect_language
from acn.text.triggers import needs_memory

log = logging.getLogger("acn.retrieve")


class MemoryRetrieveResponse(NodeResponse):
    memories: list[RetrievedMemory]
    text: str = Field(description="Rendered block, one memory per line, each tagged with its source.")
    triggered: bool
    tokens: int
    dropped: list[str] = Field(
        default_factory=list, description="Ids of stored rows left out because a field is outside what the server "
        "can read (a timestamp beyond 100 years from now, a version of 2^31 or more): see RELIABILITY.md.")
    degraded: dict[str, str] = Field(
        default_factory=dict, description="Providers that failed and were left out, e.g. {\"dense\": "
        "\"unavailable\"} (BM25 alone) or {\"rerank\": \"unavailable\"} (the fused order).")


def run(request: MemoryRetrieveRequest, deps: Deps) -> MemoryRetrieveResponse:
    """Retrieve, rank, cut and render memories for a query."""
    triggered = request.trigger == "always" or bool(request.key) or needs_memory(request.query)
    if not triggered:
        return MemoryRetrieveResponse(memories=[], text="", triggered=False, tokens=0)
    with degraded.collecting() as notes:
        ranked = rank(request, deps)
    # A row stored outside the bounds (acn/common/stored.py) is skipped and named, never a 5xx.
    dropped = [r.memory.id for r in ranked if memory_problem(r.memory) is not None]
    if dropped:
        log.warning("memory_retrieve skips stored rows outside the bounds: %s", ", ".join(dropped))
        ranked = [r for r in ranked if r.memory.id not in dropped]
    language = request.language or detect_language(request.query or "")
    chosen = [cut(r.result(), request.max_item_tokens, deps.tokenizer) for r in ranked[: request.top_k]]
    text = render_memories(chosen, language)
    return MemoryRetrieveResponse(memories=chosen, text=text, triggered=True, tokens=deps.tokenizer.count(text),
                                  dropped=dropped, degraded=dict(notes))


NODE = NodeSpec(
    name="memory_retrieve",
    request_model=MemoryRetrieveRequest,
    response_model=MemoryRetrieveResponse,
    run=run,
    summary="Retrieve the memories relevant to a query, ranked and tagged with their source",
    description=Description(
        human_en="Hybrid retrieval (BM25 with jieba, dense when configured) weighted by importance and "
                 "recency; returns at most top_k short items and a text block where each line names its source.",
        human_zh="混合检索（jieba 分词的 BM25，配置向量模型时加稠密检索），按重要性和时效加权；最多返回 top_k 条，"
                 "并给出每行带来源标记的文本块。",
        llm_en="Look up what the user said or decided earlier (identity, preferences, constraints, order numbers, "
               "parameters). Use the returned text as background, not as the user's current words.",
        llm_zh="查找用户之前说过或确认过的信息（身份、偏好、约束、订单号、参数）。返回的文本是背景信息，不是用户当前的话。",
    ),
)
