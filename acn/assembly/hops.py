"""Focused recall's candidate pool beyond one search: each question of the input, then a second hop (issue 28).

"搬去成都的那位现在做什么工作？" names an entity by one attribute and asks about another: the message that says
who moved to Chengdu ("大学室友上个月搬去成都了") matches it, the one that says their job ("大学室友最近转行当
律师助理了") shares only the entity with that message and nothing with the question. So:

1. the input is read for its focus (acn/retrieval/query_focus.py): each question after the last self-correction
   is searched on its own, and the lists are merged with each list's best scored alike (one question does not
   crowd out the other);
2. a second hop: when the best message of the first pass leaves much of the question unsaid (it names the
   entity but not what is asked), the terms that message adds (the entity: "大学室友", "the drone") are searched
   again joined to the question's terms it does not cover; what that finds joins the pool at a share of the
   hit's score. At most HOP_HITS extra searches per question, MAX_QUESTIONS questions.

A multi-line input (a pasted dialogue or text, acn/retrieval/dialogue.py) takes neither: it is searched for its
people's lines (speakers and the assistant's lines left out) and, besides, for each of its last few utterances,
the lists merged alike, each utterance's at DIALOGUE_WEIGHT of the main query's best.

Every candidate keeps where it came from in its parts ("hop": 1 for a second-hop find). Inputs with one question
whose best hit covers it take none of this: one search, as before.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from acn.retrieval.dialogue import latest_utterances, spoken_text
from acn.retrieval.query_focus import focus as read_focus
from acn.retrieval.rank import Ranked, memory_terms
from acn.text.terms import content_terms

# Both steps are on; bench.recall --ablate turns one off to measure what the other adds.
FOCUS = True
SECOND_HOP = True
DIALOGUE = True
# A pasted dialogue's latest utterances (at most dialogue.MAX_UTTERANCES), each list scaled to this share of the
# main query's best: they add what one line cues, below what the whole conversation matches. Dev halves of
# MADial-Bench (bench.recall, USE; 1k/2k zh, then en), before: 76.2/92.4, 87.7/97.0. Utterances alone (the whole
# input as the main query) at 0.7: 79.1/92.0, 87.7/97.0; the people's lines as the main query, no utterances:
# 81.3/90.8, 88.5/96.9; both, weight 0.6: 81.7/92.7, 90.0/97.7; 0.7: 82.3/94.2, 88.8/97.2; 0.8: 79.0/92.0,
# 89.2/98.1. Only the users' utterances (0.7): 80.8/92.4, 87.3/97.5; the latest counting more (x0.9 per step back)
# 81.2/93.7, 88.4/97.5; a memory's scores summed over the lists, not its best: worse (73.4 zh 1k). 0.6, not 0.7:
# BM25 only (ACN_EMBEDDER=none) 0.7 lost a memory at 4k on zh (96.8 -> 96.5), 0.6 kept it.
DIALOGUE_WEIGHT = 0.6
# A hop is tried for the best HOP_HITS messages of a question whose best hit holds under HOP_COVERAGE of the
# question's content terms; what it finds scores HOP_WEIGHT × (its share of the hop's best) × the hit's score.
# Dev splits of bench.recall (USE), 1k/2k/4k: weight 0.8 took zh-chain to 90.6/96.2/97.7 but LoCoMo from
# 81.6/87.2/92.8 to 80.6/86.9/92.3; 0.5 kept LoCoMo (81.6/87.1/92.9) and gave zh-chain 87.5; 0.65: zh-chain
# 89.8/96.2/97.7, LoCoMo 81.4/87.0/92.7.
HOP_HITS = 2
HOP_COVERAGE = 0.6
HOP_WEIGHT = 0.65
HOP_TERMS = 4  # the hit's own terms added to the hop query: the rarest in the first pass's pool
HOP_POOL = 20
# Candidates each leg (BM25, dense) of a hop's search takes before fusion: what is kept is its best HOP_POOL, and
# scoring the first pass's 120 a leg cost a third of an assemble at 10k memories (bench.assemble_10k).
HOP_SEARCH_POOL = 40
HOP_QUESTION_CHARS = 300
# A term in more than this share of the first pass's candidates is the topic, not an entity ("今天", "买").
COMMON_SHARE = 0.2

class Search(Protocol):
    """`search(text, k)`: the best k candidates for the text; `pool`: candidates each leg takes (default: the
    caller's)."""

    def __call__(self, text: str, k: int, pool: int | None = None) -> list[Ranked]: ...


def gathered(query: str, search: Search, top_k: int, *, focus: bool | None = None,
             hops: bool | None = None) -> list[Ranked]:
    """Return the candidates for the input, best first: each of its questions searched (`search(text, top_k)`),
    plus second-hop finds, merged by memory (a memory found twice keeps its best score). `focus` and `hops`
    default to FOCUS and SECOND_HOP."""
    focus = FOCUS if focus is None else focus
    hops = SECOND_HOP if hops is None else hops
    asked = read_focus(query) if focus else None
    # A message typed over several lines that corrects itself or asks several things is read for its focus; any
    # other multi-line input (a pasted dialogue or text) has no question to focus on, no entity to hop from.
    latest = latest_utterances(query) if focus and DIALOGUE and not (asked and asked.changed) else []
    if latest:
        return merged([search(spoken_text(query), top_k), *(search(line, top_k) for line in latest)],
                      weights=[1.0, *[DIALOGUE_WEIGHT] * len(latest)])
    questions = asked.questions if asked is not None and asked.changed else (query,)
    lists = [search(question, top_k) for question in questions]
    hopped = [found for question, first in zip(questions, lists, strict=True)
              for found in second_hops(question, first, search)] if hops else []
    return merged(lists, hopped)


def merged(lists: list[list[Ranked]], hopped: list[list[Ranked]] | None = None,
           weights: list[float] | None = None) -> list[Ranked]:
    """Return the union of ranked lists, best first: each question's list scaled so its best equals the first
    one's best (times its weight, when given), second-hop lists as scored (below their hit); a memory found twice
    keeps its best score."""
    if len(lists) == 1 and not hopped:
        return lists[0]
    top = next((found[0].score for found in lists if found), 0.0)
    best: dict[str, Ranked] = {}
    for number, found in enumerate([*lists, *(hopped or [])]):
        scale = top / found[0].score if number < len(lists) and found and found[0].score > 0 else 1.0
        scale *= weights[number] if weights is not None and number < len(weights) else 1.0
        for candidate in found:
            scored = replace(candidate, score=round(candidate.score * scale, 4)) if scale != 1.0 else candidate
            previous = best.get(scored.memory.id)
            if previous is None or scored.score > previous.score:
                best[scored.memory.id] = scored
    return sorted(best.values(), key=lambda r: (-r.score, -r.memory.updated_at))


def second_hops(question: str, first: list[Ranked], search: Search) -> list[list[Ranked]]:
    """Return, for the best messages of the first pass that leave the question partly unsaid, what a search for
    their entity joined to the rest of the question finds, scored below the hit (see HOP_WEIGHT)."""
    wanted = list(dict.fromkeys(content_terms(question)))
    if not wanted or not first or "\n" in question.strip() or len(question) > HOP_QUESTION_CHARS:
        return []  # a pasted dialogue or text is not a question about one entity
    hits = [r for r in first if r.memory.kind == "turn"][:HOP_HITS]
    if not hits or coverage(hits[0], wanted) >= HOP_COVERAGE:
        return []
    pool = [memory_terms(r.memory) for r in first]
    found = []
    for hit in hits:
        hop = hop_query(hit, wanted, pool)
        if not hop:
            continue
        results = [r for r in search(hop, HOP_POOL, HOP_SEARCH_POOL) if r.memory.id != hit.memory.id]
        if not results or results[0].score <= 0:
            continue
        best = results[0].score
        found.append([replace(r, score=round(hit.score * HOP_WEIGHT * r.score / best, 4), parts={**r.parts, "hop": 1.0})
                      for r in results])
    return found


def coverage(hit: Ranked, wanted: list[str]) -> float:
    """Return the share of the question's content terms the hit contains."""
    terms = memory_terms(hit.memory)
    return sum(term in terms for term in wanted) / len(wanted)


def hop_query(hit: Ranked, wanted: list[str], pool: list[frozenset[str]]) -> str:
    """Return the second hop's query: the hit's rarest terms the question lacks (its entity), then the question's
    terms the hit lacks (what is asked); "" when the hit adds nothing."""
    have = memory_terms(hit.memory)
    asked = set(wanted)
    limit = max(2.0, COMMON_SHARE * len(pool))
    frequency = {term: sum(term in terms for terms in pool) for term in have - asked}
    entity = sorted((t for t, n in frequency.items() if n <= limit and len(t) > 1), key=lambda t: (frequency[t], t))
    if not entity:
        return ""
    rest = [term for term in wanted if term not in have]
    return " ".join([*entity[:HOP_TERMS], *rest])
