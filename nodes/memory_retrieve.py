"""MemoryRetrieve: hybrid ranking, scoped filters, limited injection with source tags."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Annotated, Literal

import numpy as np
from pydantic import BeforeValidator, Field

from common.deps import Deps
from common.models import KEY_PATTERN, Language, Memory, MemoryKind, Namespace, NodeResponse, Scope, parse_json_string
from nodes.memory_write import repository
from nodes.spec import Description, NodeSpec
from storage.base import Filter
from storage.memories import Scored, kinds_filter, live_filter, scope_filter
from text.dates import normalise_date
from text.lang import detect_language
from text.query import speaker_names
from text.terms import content_term_set, content_terms, expand_query
from text.tokens import Tokenizer
from text.triggers import needs_memory

# Relevance dominates; importance × recency breaks ties between similarly relevant memories.
RELEVANCE_WEIGHT = 0.7
SALIENCE_WEIGHT = 0.3
CANDIDATE_FACTOR = 8
MAX_POOL = 160
MIN_POOL = 120  # the re-ranker needs room below the engine's top hits
# Reciprocal rank fusion of the BM25 and dense lists (Cormack et al. use 60; a small k keeps the top of
# each list apart from its tail, which matters when only a few dozen candidates are kept).
RRF_K = 10
BM25_WEIGHT = 1.0
DENSE_WEIGHT = 1.0
# The store's BM25 does not stem ("research" misses "researching"): the candidates are re-scored by the
# IDF-weighted share of the query's stemmed content terms they contain (IDF over the candidates).
COVERAGE_WEIGHT = 2.0
# A message spoken by the person a query names ("what did Caroline …", "我之前说…") is more likely the answer.
SPEAKER_BONUS = 0.3
KIND_LABELS_ZH = {
    "identity": "身份", "preference": "偏好", "constraint": "约束", "decision": "决策", "fact": "事实",
    "todo": "待办", "artifact": "产出", "knowledge": "知识", "summary": "摘要", "turn": "原话",
}
ROLE_LABELS_ZH = {"user": "用户", "assistant": "助手", "tool": "工具"}


# The longest query a retrieval takes. Nodes that retrieve for a longer text (assemble's user_input, the Dify
# extension's query) retrieve for its last MAX_QUERY_CHARS characters: see retrieval_query.
MAX_QUERY_CHARS = 8000


def retrieval_query(text: str) -> str:
    """Return the part of a long input to retrieve for: its end, where the question of a pasted text usually is."""
    return text if len(text) <= MAX_QUERY_CHARS else text[-MAX_QUERY_CHARS:]


class MemoryRetrieveRequest(Namespace):
    """Find the memories that matter for a query."""

    query: str = Field(default="", max_length=MAX_QUERY_CHARS,
                       description="The user input or question to retrieve for.")
    kinds: Annotated[list[MemoryKind] | None, BeforeValidator(parse_json_string)] = Field(
        default=None, description="Only these kinds (archived turns are excluded unless named).")
    scopes: Annotated[list[Scope] | None, BeforeValidator(parse_json_string)] = Field(
        default=None, description="Only these scopes; default session + user + agent + shared.")
    top_k: int = Field(default=3, ge=1, le=50, description="At most this many memories (seed: 3).")
    max_item_tokens: int = Field(default=200, ge=8, le=4000, description="Each memory cut to this many tokens.")
    min_score: float = Field(default=0.0, ge=0, le=1, description="Drop memories scoring below this (0–1).")
    trigger: Literal["always", "auto"] = Field(
        default="always", description="auto: retrieve only when the query refers back or asks about the user/rules.")
    key: str | None = Field(default=None, max_length=128, pattern=KEY_PATTERN,
                            description="Exact key lookup instead of search.")
    include_superseded: bool = Field(default=False, description="Also return superseded versions.")
    half_life_hours: float | None = Field(
        default=None, gt=0, le=1e6, description="Recency half-life; default from settings.")
    language: Language | None = Field(default=None, description="Language of the tags; default: the query's.")


class RetrievedMemory(Memory):
    score: float = Field(description="Final score in [0, 1].")
    score_parts: dict[str, float] = Field(description="relevance, bm25, dense, importance, recency.")


@dataclass(slots=True)  # not frozen: assembly makes one per candidate, and a frozen init costs twice as much
class Ranked:
    """A stored memory with its score. Ranking hands these on; the response model is built only for what a
    node returns (assembly scores a hundred or more candidates per call and returns the memories)."""

    memory: Memory
    score: float
    parts: dict[str, float]

    def result(self) -> RetrievedMemory:
        """Return the memory with its score, as memory_retrieve returns it (parts rounded)."""
        return RetrievedMemory(**self.memory.model_dump(), score=self.score,
                               score_parts={name: round(value, 4) for name, value in self.parts.items()})


class MemoryRetrieveResponse(NodeResponse):
    memories: list[RetrievedMemory]
    text: str = Field(description="Rendered block, one memory per line, each tagged with its source.")
    triggered: bool
    tokens: int


def run(request: MemoryRetrieveRequest, deps: Deps) -> MemoryRetrieveResponse:
    """Retrieve, rank, cut and render memories for a query."""
    triggered = request.trigger == "always" or bool(request.key) or needs_memory(request.query)
    if not triggered:
        return MemoryRetrieveResponse(memories=[], text="", triggered=False, tokens=0)
    ranked = rank(request, deps)
    language = request.language or detect_language(request.query or "")
    chosen = [cut(r.result(), request.max_item_tokens, deps.tokenizer) for r in ranked[: request.top_k]]
    text = render_memories(chosen, language)
    return MemoryRetrieveResponse(memories=chosen, text=text, triggered=True, tokens=deps.tokenizer.count(text))


def rank(request: MemoryRetrieveRequest, deps: Deps, *, pool: int | None = None,
         distinct: bool = False) -> list[Ranked]:
    """Return scored memories, best first, above min_score; `pool` candidates per search list."""
    memories = repository(deps)
    where = (scope_filter(request, request.scopes).and_(live_filter(request.include_superseded))
             .and_(kinds_filter(request.kinds, exclude_turns=True)))
    if request.key:
        found = memories.find(deps.tenant, where.and_(Filter("key == {lookup}", {"lookup": request.key})), limit=100,
                              within=request)
        candidates = [Scored(m, bm25=1.0) for m in found]
    else:
        pool = pool or max(2 * request.top_k, min(request.top_k * CANDIDATE_FACTOR, MAX_POOL))
        candidates = memories.search(deps.tenant, request.query, where, limit=pool,
                                     text_query=expand_query(request.query), within=request, distinct=distinct)
    # Lite's BM25 also returns rows that share no term with the query (score 0): they are not matches.
    candidates = [c for c in candidates if c.bm25 > 0 or c.dense > 0]
    half_life = request.half_life_hours or deps.settings.recency_half_life_hours
    scored = score_all(candidates, half_life, time.time() * 1000, request.query)
    kept = [m for m in scored if m.score >= request.min_score]
    return sorted(kept, key=lambda r: (r.score, r.memory.updated_at), reverse=True)


def score_all(candidates: list[Scored], half_life_hours: float, now_ms: float,
              query: str = "") -> list[Ranked]:
    """Combine relevance with importance × recency decay.

    relevance = (engine + COVERAGE_WEIGHT × coverage + SPEAKER_BONUS if spoken by whom the query names) /
    (1 + COVERAGE_WEIGHT + SPEAKER_BONUS), in [0, 1]; engine is BM25 normalised by the best hit or, with an
    embedder, the reciprocal-rank fusion of the BM25 and dense lists; coverage is the IDF-weighted share of the
    query's stemmed content terms found in the memory.
    """
    if not candidates:
        return []
    # Assembly re-scores a hundred or more candidates per call: the signals are computed as arrays.
    memories = [c.memory for c in candidates]
    raw_bm25 = np.array([c.bm25 for c in candidates], dtype=np.float64)
    bm25 = raw_bm25 / (float(raw_bm25.max()) or 1.0)
    hybrid = any(c.dense_rank is not None for c in candidates)
    names = {str(m.meta["name"]) for m in memories if m.meta.get("name")}
    speakers = speaker_names(query, names) if query else set()
    query_terms = content_terms(query)
    covered = coverage_all(query_terms, memories)
    relevance = (np.array([fused(c) for c in candidates]) if hybrid else bm25) + COVERAGE_WEIGHT * covered
    if speakers:
        relevance += np.array([SPEAKER_BONUS if spoken_by(m, speakers) else 0.0 for m in memories])
    relevance /= 1 + (COVERAGE_WEIGHT if query_terms else 0) + (SPEAKER_BONUS if speakers else 0)
    age_hours = np.maximum(0.0, now_ms - np.array([m.updated_at for m in memories], dtype=np.float64)) / 3_600_000
    recency = 0.5 ** (age_hours / half_life_hours)
    importance = np.array([m.importance for m in memories], dtype=np.float64) / 10
    score = RELEVANCE_WEIGHT * relevance + SALIENCE_WEIGHT * importance * recency
    return [Ranked(memory, round(total, 4), {"relevance": r, "bm25": b, "dense": c.dense, "importance": i,
                                             "recency": d})
            for memory, c, total, r, b, i, d in zip(memories, candidates, score.tolist(), relevance.tolist(),
                                                     bm25.tolist(), importance.tolist(), recency.tolist(), strict=True)]


def coverage_all(query_terms: list[str], memories: list[Memory]) -> np.ndarray:
    """Return, per memory, the IDF-weighted share of the query's distinct content terms it contains.

    IDF is taken over these memories, ln(1 + (N - df + 0.5) / (df + 0.5)); a term none of them has weighs
    ln(1 + N + 0.5).
    """
    if not query_terms:
        return np.zeros(len(memories))
    documents = [content_term_set(m.content) for m in memories]
    wanted = list(dict.fromkeys(query_terms))
    present = np.array([[term in terms for terms in documents] for term in wanted], dtype=np.float64)
    frequency = present.sum(axis=1)
    count = len(documents)
    weights = np.where(frequency > 0, np.log(1 + (count - frequency + 0.5) / (frequency + 0.5)),
                       math.log(1 + count + 0.5))
    total = float(weights.sum())
    return weights @ present / total if total else np.zeros(count)


def fused(candidate: Scored) -> float:
    """Return the reciprocal-rank fusion of a candidate's BM25 and dense ranks, in [0, 1]."""
    best = (BM25_WEIGHT + DENSE_WEIGHT) / (RRF_K + 1)
    total = sum(weight / (RRF_K + rank) for weight, rank in ((BM25_WEIGHT, candidate.bm25_rank),
                                                             (DENSE_WEIGHT, candidate.dense_rank)) if rank)
    return total / best


def spoken_by(memory: Memory, speakers: set[str]) -> bool:
    """Return True when an archived message was said by one of the speakers (by `name` or by role)."""
    return memory.kind == "turn" and bool(speakers & {memory.meta.get("name"), memory.meta.get("role")})


def cut(memory: RetrievedMemory, max_tokens: int, tokenizer: Tokenizer) -> RetrievedMemory:
    """Return the memory with its content cut to max_tokens."""
    content = tokenizer.truncate(memory.content, max_tokens)
    return memory if content == memory.content else memory.model_copy(update={"content": content})


def source_tag(memory: Memory, language: str) -> str:
    """Return the tag that tells the model a line comes from memory: kind, turns and, when known, time."""
    parts = ["来自记忆" if language == "zh" else "from memory"]
    if memory.kind != "turn":  # an archived message says who spoke instead (see render_memory)
        parts.append(KIND_LABELS_ZH.get(memory.kind, memory.kind) if language == "zh" else memory.kind)
    when = memory.meta.get("time") or memory.meta.get("date")
    dated = isinstance(when, str) and bool(when.strip())
    # For an archived message a date tells a model more than a turn number (which stays in `sources`).
    if memory.turn_range and not (dated and memory.kind == "turn"):
        parts.append(turns_label(memory.turn_range, language))
    if dated:
        parts.append(normalise_date(str(when)))
    if memory.valid_to:
        parts.append("已被取代" if language == "zh" else "superseded")
    return "[" + " · ".join(parts) + "]"


def speaker_label(memory: Memory, language: str) -> str:
    """Return who said an archived message (its name, else its role), or "" for other memories."""
    if memory.kind != "turn":
        return ""
    name = memory.meta.get("name")
    if isinstance(name, str) and name:
        return name
    role = str(memory.meta.get("role") or "")
    return ROLE_LABELS_ZH.get(role, role) if language == "zh" else role


def turns_label(turn_range: list[int], language: str) -> str:
    """Return 第3-8轮 / turns 3-8 (a single turn as 第3轮 / turn 3)."""
    first, last = turn_range[0], turn_range[-1]
    span = str(first) if first == last else f"{first}-{last}"
    if language == "zh":
        return f"第{span}轮"
    return f"turn {span}" if first == last else f"turns {span}"


def render_memories(memories: list[RetrievedMemory] | list[Memory], language: str) -> str:
    """Return one tagged line per memory; an archived message names its speaker."""
    return "\n".join(render_memory(m, language) for m in memories)


def render_memory(memory: Memory, language: str) -> str:
    """Return one memory as a tagged line: `[tag] content`, or `[tag] speaker: content` for a message."""
    speaker = speaker_label(memory, language)
    return f"{source_tag(memory, language)} {speaker + ': ' if speaker else ''}{memory.content}"


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
