"""The reads an assemble and a record_turn make of a session, made once by the start-up warmer (app/warmer.py).

On a Lite file a session's in-process index answers each filter by testing every row once, then keeps the result
(LocalIndex._mask, kept current by the writes): measured on a warmed 5k-row namespace, the first assemble spent
~90 % of its 0.9 s testing three filters (what is in force, what was superseded, what may be searched), the second
none. Made here before the first call, with the filters assemble itself builds; nothing is written.

Then the texts (warm_texts): the re-ranker reads each candidate's content terms (retrieval/hybrid_rank.py coverage_all),
jieba's HMM segmentation of every Chinese run, ~1-2 ms a text, kept in the text cache. Measured after a restart on
a warmed namespace of 10k memories with `use`: the first assemble spent 0.58 s of its 0.75 s segmenting its ~240
candidates, none of them kept yet. The candidates are whatever the question finds, so the namespace's texts are
segmented, newest first, within the text cache's share the warmer allows.
"""

from __future__ import annotations

from typing import get_args

from acn.assembly.current import stale_values
from acn.assembly.standing import FOCUSED_KINDS, STANDING_KINDS, STANDING_LIMIT
from acn.common.models import MemoryKind, Namespace
from acn.retrieval.hybrid_rank import MemoryRetrieveRequest
from acn.retrieval.learned_ranker import load_model
from acn.storage.repositories import MemoryRepository
from acn.text.byte_cache import TEXT_CACHE
from acn.text.terms import segmented
from acn.text.tokens import Tokenizer

WARM_QUERY = "warm"  # any text: the search's filter, not its result, is what is kept
# The share of the text cache (ACN_TEXT_CACHE_MB) a start-up pass may fill with segmented texts: the rest stays for
# what the first calls segment themselves (queries, new messages, dedup's shingles).
TEXT_SHARE = 0.5


def texts_budget() -> int:
    """Return the bytes of segmented texts a start-up pass may keep (TEXT_SHARE of the text cache)."""
    return int(TEXT_CACHE.max_bytes * TEXT_SHARE)


def warm_texts(memories: MemoryRepository, tenant: str, namespace: Namespace, budget: int) -> int:
    """Segment the content terms of the texts the namespace's index holds, newest first, until about `budget` bytes
    are kept; return the bytes used."""
    used = 0
    for text in reversed(memories.queries.texts_held(tenant, namespace)):
        if used >= budget:
            break
        used += segmented(text)
    return used


def warm_reads(memories: MemoryRepository, tokenizer: Tokenizer, tenant: str, namespace: Namespace) -> None:
    """Make the reads a focused assemble makes of the namespace (standing memories, stale values, the search's
    filter) so that their results are kept before its first call, and count its standing memories' tokens."""
    # The session's archived messages by turn (record_turn's dedup of messages, neighbour expansion): a Lite file
    # keeps them per session once read from its index.
    memories.archived_messages(tenant, namespace, [0])
    load_model()  # the ranker's forests, parsed once per process (~30 ms)
    for kinds in (FOCUSED_KINDS, STANDING_KINDS):  # a focused assemble's standing memories, a snapshot's
        standing = memories.queries.standing(tenant, namespace, kinds, limit=STANDING_LIMIT)
        if kinds is FOCUSED_KINDS:
            # A focused assemble counts the tokens of every one of them to fit its share (standing.within_share):
            # after a restart, a namespace of 10k memories' first assemble spent ~4 ms of its 12 ms in 200 tiktoken
            # encodes of these texts, none of them counted yet (the tokenizer keeps counts by text).
            for memory in standing:
                tokenizer.count(memory.content)
    stale_values(memories, tenant, namespace)
    # As a snapshot's retrieve and memory_retrieve's default do (kinds None: no turns), and as recall.ranked builds
    # it (every kind: focused); the request's default scopes. Focused last: an index keeps the vectors of one dense
    # filter copied out (LocalIndex._allowed_vectors, 10k rows of 512 floats: ~35 ms), and a focused assemble's
    # first call also segments its candidates, while memory_retrieve's is light (USE, 10k: ~25 ms against ~60).
    # With a user, the focused search reads their earlier conversations' archive as recall.ranked does: its index's
    # filter mask and vectors (O(the user's messages)) are made here, not on a new conversation's first call.
    every: list[MemoryKind] = list(get_args(MemoryKind))
    for wanted in (None, every):
        request = MemoryRetrieveRequest(agent_id=namespace.agent_id, session_id=namespace.session_id,
                                        user_id=namespace.user_id, query=WARM_QUERY, kinds=wanted)
        memories.queries.search_readable(tenant, request, WARM_QUERY, scopes=request.scopes,
                                 include_superseded=request.include_superseded, kinds=request.kinds, limit=1,
                                 earlier=wanted is not None and bool(namespace.user_id))
