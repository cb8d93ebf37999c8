"""Hybrid ranking of stored memories: scoped filters, BM25/dense fusion, term coverage, importance × recency."""

from __future__ import annotations

import logging
import math
import operator
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Literal, TypeVar

import numpy as np
from pydantic import BeforeValidator, Field

from acn.common import degraded
from acn.common.errors import PackError
from acn.common.models import KEY_PATTERN, Memory, MemoryKind, Namespace, Scope, parse_json_string
from acn.common.row_memo import remembered
from acn.services.deps import Deps
from acn.storage.repositories import Scored
from acn.text.lang import Language
from acn.text.query import speaker_names
from acn.text.terms import content_term_set, content_terms, expand_query
from acn.text.tokens import Tokenizer

T = TypeVar("T")
log = logging.getLogger("acn.retrieve")

# Relevance dominates; importance × recency breaks ties between similarly relevant memories.
RELEVANCE_WEIGHT = 0.7
SALIENCE_WEIGHT = 0.3
# ... and only between those: salience counts in full for a candidate at least SALIENCE_GATE × as relevant as the
# best one and fades in proportion below. Ungated, a line rated important but barely relevant outranked the
# messages a question needed (the heuristic extractor rates "…问我要不要一起去健身房" a constraint, importance 7).
# Issue 17, dev splits of bench.recall at 1k/2k/4k: zh-daily 90.6/96.4/98.8 -> 93.3/97.6/99.1, MADial zh
# 69.0/87.6/99.4 -> 73.4/89.4/99.4, MADial en 84.1/95.5/100 -> 82.9/97.2/100, LoCoMo 79.9/86.1/92.3 ->
# 80.0/86.5/92.4. Dropping salience altogether was worse on MADial en at 1k (76.5), a gate of 0.7 on zh-daily (92.1).
# memory_retrieve ranks the same way. With an embedder only: BM25 alone keeps the ungated sum (see score_all).
SALIENCE_GATE = 0.5
CANDIDATE_FACTOR = 8
MAX_POOL = 160
MIN_POOL = 120  # the re-ranker needs room below the engine's top hits
# Reciprocal rank fusion of the BM25 and dense lists (Cormack et al. use 60; a small k keeps the top of
# each list apart from its tail, which matters when only a few dozen candidates are kept).
RRF_K = 10
# The dense list counts twice the BM25 one: tuned on the dev splits of bench.recall (issue 17; USE vectors). On
# MADial-Bench zh at 1k it gained 5 points over equal weights, on LoCoMo conversations 0 and 3 it moved recall
# by under a point either way (-0.6 at 1k, +0.9 at 4k); the lexical side keeps its say through term coverage.
BM25_WEIGHT = 1.0
DENSE_WEIGHT = 2.0
# The store's BM25 does not stem ("research" misses "researching"): the candidates are re-scored by the
# IDF-weighted share of the query's stemmed content terms they contain (IDF over the candidates).
COVERAGE_WEIGHT = 2.0
# A message spoken by the person a query names ("what did Caroline …", "我之前说…") is more likely the answer.
SPEAKER_BONUS = 0.3


# What a reranker reads of each candidate: enough for any memory or message piece, and a bounded payload.
MAX_RERANK_CHARS = 4000
# score_all builds a Ranked only for candidates that may be among the best `keep` (kept_rows); bench.assemble_10k
# --compare turns this off to measure what it saves.
LEAVE_OUT = True
# The smallest score difference (scores are rounded to 4 places) that keeps reranked candidates apart.
SCORE_STEP = 0.0001


# The longest query a retrieval takes. Nodes that retrieve for a longer text (assemble's user_input, the Dify
# extension's query) retrieve for its last MAX_QUERY_CHARS characters: see retrieval_query.
MAX_QUERY_CHARS = 8000


# Punctuation in a query: the store's analyzer keeps punctuation tokens, and a query quoting a dialogue ("：", "，",
# "?" dozens of times) would score every document for its commas, each repeat counted (rank_bm25 over jieba words,
# the baseline, has none). A dot inside a number stays ("3.5" is one token).
_QUERY_PUNCTUATION = re.compile(r"(?:(?<!\d)\.|\.(?!\d)|[^\w\s.])+")


def lexical_query(text: str) -> str:
    """Return the query BM25 searches: punctuation replaced by spaces."""
    return _QUERY_PUNCTUATION.sub(" ", text)


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
    score_parts: dict[str, float] = Field(description="relevance, bm25, dense, importance, recency; rerank when "
                                                      "ACN_RERANK_URL reordered it (the reranker's score).")


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


def rank(request: MemoryRetrieveRequest, deps: Deps, *, pool: int | None = None,
         distinct: bool = False, dense_weight: float | None = None, keep: int | None = None,
         earlier: bool = False) -> list[Ranked]:
    """Return scored memories, best first, above min_score; `pool` candidates per search list; `dense_weight`:
    how much the dense list counts in the fusion (default DENSE_WEIGHT); `keep`: the caller reads only the best
    `keep` of them (the rest may be left out; the best `keep` are the same); `earlier`: the user's archived
    messages of their other conversations are candidates too (issue 48)."""
    memories = deps.memories
    if request.key:
        found = memories.queries.by_key(deps.tenant, request, request.key, scopes=request.scopes,
                                include_superseded=request.include_superseded, kinds=request.kinds, limit=100)
        candidates = [Scored(m, bm25=1.0) for m in found]
    else:
        pool = pool or max(2 * request.top_k, min(request.top_k * CANDIDATE_FACTOR, MAX_POOL))
        candidates = memories.queries.search_readable(
            deps.tenant, request, request.query, scopes=request.scopes, include_superseded=request.include_superseded,
            kinds=request.kinds, limit=pool, distinct=distinct, text_query=expand_query(lexical_query(request.query)),
            earlier=earlier)
    # Lite's BM25 also returns rows that share no term with the query (score 0): they are not matches.
    candidates = [c for c in candidates if c.bm25 > 0 or c.dense > 0]
    candidates = committed(candidates, lambda c: c.memory, deps)
    half_life = request.half_life_hours or deps.settings.recency_half_life_hours
    if keep is not None and deps.reranker is not None:
        keep = max(keep, deps.reranker.top_n)  # the reranker reorders its whole head
    scored = score_all(candidates, half_life, time.time() * 1000, request.query, dense_weight=dense_weight,
                       keep=keep)
    kept = [m for m in scored if m.score >= request.min_score]
    ordered = sorted(kept, key=lambda r: (r.score, r.memory.updated_at), reverse=True)
    return reranked(request.query, ordered, deps) if not request.key else ordered


def committed(items: list[T], memory_of: Callable[[T], Memory], deps: Deps) -> list[T]:
    """Return the items whose memory is not an archived message of a turn its session has not committed.

    record_turn archives a turn's messages before it commits the turn: until then (or, for a request killed in
    between, until the session's next turn sweeps them) those rows are not part of the conversation.
    """
    sessions = {(m.agent_id, m.session_id) for m in map(memory_of, items) if m.kind == "turn" and m.session_id}
    marks = deps.sessions.archiving_marks(deps.tenant, sessions) if sessions else {}
    if not marks:
        return items
    return [item for item in items if not _uncommitted(memory_of(item), marks)]


def _uncommitted(memory: Memory, marks: dict[tuple[str, str], int]) -> bool:
    last = marks.get((memory.agent_id, memory.session_id or ""))
    return (last is not None and memory.kind == "turn" and bool(memory.turn_range)
            and (memory.turn_range or [0])[0] > last)


def reranked(query: str, ordered: list[Ranked], deps: Deps) -> list[Ranked]:
    """Return the candidates with the best ACN_RERANK_TOP_N of them in the reranker's order (ACN_RERANK_URL).

    The reordered candidates take the same scores, best first, in their new order: whatever sorts by score
    later (assembly's packing, the score floor) keeps the reranker's order, and the rest stay below them.
    score_parts["rerank"] is the reranker's own score. A reranker that fails, times out or answers malformed
    leaves the fused order, noted as degraded (`rerank: unavailable`).
    """
    reranker = deps.reranker
    if reranker is None or not query.strip() or len(ordered) < 2:
        return ordered
    head, tail = ordered[:reranker.top_n], ordered[reranker.top_n:]
    try:
        order = reranker.rerank_strict(query, [r.memory.content[:MAX_RERANK_CHARS] for r in head], len(head))
    except PackError as error:
        log.warning("rerank failed, keeping the fused order: %s", error.message)
        degraded.note("rerank")
        return ordered
    by_reranker = dict(order)
    placed = [index for index, _ in order]
    placed += [index for index in range(len(head)) if index not in by_reranker]  # unranked: after, as fused
    scores = sorted((r.score for r in head), reverse=True)
    for position in range(1, len(scores)):  # strictly decreasing: a tie broken later by age would undo the order
        scores[position] = round(min(scores[position], scores[position - 1] - SCORE_STEP), 4)
    return [Ranked(head[index].memory, score, {**head[index].parts, "rerank": by_reranker.get(index, 0.0)})
            for index, score in zip(placed, scores, strict=True)] + tail


def score_all(candidates: list[Scored], half_life_hours: float, now_ms: float,
              query: str = "", *, dense_weight: float | None = None, keep: int | None = None) -> list[Ranked]:
    """Combine relevance with importance × recency decay (gated by relevance when hybrid, see salience_gate).

    relevance = (engine + COVERAGE_WEIGHT × coverage + SPEAKER_BONUS if spoken by whom the query names) /
    (1 + COVERAGE_WEIGHT + SPEAKER_BONUS), in [0, 1]; engine is BM25 normalised by the best hit or, with an
    embedder, the reciprocal-rank fusion of the BM25 and dense lists; coverage is the IDF-weighted share of the
    query's stemmed content terms found in the memory.

    With `keep`, only candidates that may be among the best `keep` by rounded score are returned (see kept_rows).
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
    relevance = ((np.array([fused(c, dense_weight) for c in candidates]) if hybrid else bm25)
                 + COVERAGE_WEIGHT * covered)
    if speakers:
        relevance += np.array([SPEAKER_BONUS if spoken_by(m, speakers) else 0.0 for m in memories])
    relevance /= 1 + (COVERAGE_WEIGHT if query_terms else 0) + (SPEAKER_BONUS if speakers else 0)
    age_hours = np.maximum(0.0, now_ms - np.array([m.updated_at for m in memories], dtype=np.float64)) / 3_600_000
    recency = 0.5 ** (age_hours / half_life_hours)
    importance = np.array([m.importance for m in memories], dtype=np.float64) / 10
    # BM25 alone (no embedder): ungated, as measured best there (dev, MADial zh 4k 96.2 ungated, 95.6 gated).
    gate = salience_gate(relevance) if hybrid else 1.0
    score = RELEVANCE_WEIGHT * relevance + SALIENCE_WEIGHT * importance * recency * gate
    rows = kept_rows(score, keep)
    if rows is not None:
        memories, candidates = [memories[i] for i in rows], [candidates[i] for i in rows]
        score, relevance, bm25, importance, recency = (a[rows] for a in (score, relevance, bm25, importance, recency))
    return [Ranked(memory, round(total, 4), {"relevance": r, "bm25": b, "dense": c.dense, "importance": i,
                                             "recency": d})
            for memory, c, total, r, b, i, d in zip(memories, candidates, score.tolist(), relevance.tolist(),
                                                     bm25.tolist(), importance.tolist(), recency.tolist(), strict=True)]


def kept_rows(score: np.ndarray, keep: int | None) -> np.ndarray | None:
    """Return the rows that may be among the best `keep` once scores are rounded to 4 places (None: all of them).

    Building a Ranked per candidate was the largest single cost of a search (assembly asks for 60 of ~240; a second
    hop for 20). A row scoring 2 × SCORE_STEP under the keep-th best rounds strictly below it, so leaving such rows
    out changes nothing of the best `keep`, ties broken by age included.
    """
    if not LEAVE_OUT or keep is None or keep >= len(score) or not np.isfinite(score).all():
        return None
    threshold = float(np.partition(score, len(score) - keep)[len(score) - keep])
    return np.flatnonzero(score >= threshold - 2 * SCORE_STEP)


def salience_gate(relevance: np.ndarray) -> np.ndarray:
    """Return, per candidate, the share of its importance × recency that counts: 1 from SALIENCE_GATE × the best
    relevance up, proportionally less below (all 1 when no candidate is relevant: salience alone orders them)."""
    best = float(relevance.max()) if relevance.size else 0.0
    if best <= 0:
        return np.ones_like(relevance)
    return np.minimum(1.0, relevance / (SALIENCE_GATE * best))


def coverage_all(query_terms: list[str], memories: list[Memory]) -> np.ndarray:
    """Return, per memory, the IDF-weighted share of the query's distinct content terms it contains.

    IDF is taken over these memories, ln(1 + (N - df + 0.5) / (df + 0.5)); a term none of them has weighs
    ln(1 + N + 0.5).
    """
    if not query_terms:
        return np.zeros(len(memories))
    documents = [memory_terms(m) for m in memories]
    wanted = list(dict.fromkeys(query_terms))
    present = np.array([[term in terms for terms in documents] for term in wanted], dtype=np.float64)
    frequency = present.sum(axis=1)
    count = len(documents)
    weights = np.where(frequency > 0, np.log(1 + (count - frequency + 0.5) / (frequency + 0.5)),
                       math.log(1 + count + 0.5))
    total = float(weights.sum())
    return weights @ present / total if total else np.zeros(count)


def memory_terms(memory: Memory) -> frozenset[str]:
    """Return content_term_set of a memory's content, kept with the memory object (acn/common/row_memo.py).

    A session's candidates are the same objects call after call; kept in the text cache instead, they were pushed
    out by other sessions' texts, and with 32 chats at once each turn segmented ~20 of them again (issue 47).
    """
    content = memory.content
    return remembered(memory, "terms", content, operator.eq, lambda: content_term_set(content))


def fused(candidate: Scored, dense_weight: float | None = None) -> float:
    """Return the reciprocal-rank fusion of a candidate's BM25 and dense ranks, in [0, 1]."""
    dense_weight = DENSE_WEIGHT if dense_weight is None else dense_weight
    best = (BM25_WEIGHT + dense_weight) / (RRF_K + 1)
    total = sum(weight / (RRF_K + rank) for weight, rank in ((BM25_WEIGHT, candidate.bm25_rank),
                                                             (dense_weight, candidate.dense_rank)) if rank)
    return total / best


def spoken_by(memory: Memory, speakers: set[str]) -> bool:
    """Return True when an archived message was said by one of the speakers (by `name` or by role)."""
    return memory.kind == "turn" and bool(speakers & {memory.meta.get("name"), memory.meta.get("role")})


def cut(memory: RetrievedMemory, max_tokens: int, tokenizer: Tokenizer) -> RetrievedMemory:
    """Return the memory with its content cut to max_tokens."""
    content = tokenizer.truncate(memory.content, max_tokens)
    return memory if content == memory.content else memory.model_copy(update={"content": content})
