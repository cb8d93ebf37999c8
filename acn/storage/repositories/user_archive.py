"""A returning user's earlier conversations as search candidates (issue 48): the user's archived messages of their
other conversations with the agent, searched beside the conversation's own rows and ranked with them.

On a Lite file they are searched in the in-process index of the user's archive (memory_rows.user_turns_group),
shared by every conversation of the user and kept current by every write: a request reads none of the user's
rows from the store once it is held. The index is searched with one filter whatever the conversation (so its mask
is kept), and the asking conversation's own messages are dropped from the hits afterwards: they are the session's
own candidates already. A user with no message outside this conversation costs no search (has_earlier).

The archive (and the index of the user's memories: MemoryRepository.search, the database room's held_search) is
searched for the input's words without its function words (archive_query): a message or memory of another
conversation that shares only "我" or "the" with the input is no reason to bring it back, and a returning user with
hundreds of conversations would otherwise rank hundreds of such matches on every call (bench/user_cost.py: 600
memories and 2,400 messages matched "给我推荐点零食吧" by 我 alone).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from acn.common.models import Memory, Namespace
from acn.storage.database import (
    DISTINCT_FETCH,
    EMBEDDED,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    CollectionSpec,
    Filter,
    Hit,
    MemoryStore,
    ReadCache,
    from_record,
    merged_hits,
    one_per_text,
    tenant_filter,
    user_turns_group,
)
from acn.storage.repositories.memory_heads import MemoryHeads
from acn.text.terms import STOP_EN, STOP_ZH, bm25_tokens


class ArchiveSource(Protocol):
    """What these functions read of memories.MemoryRepository (named here: that module imports this one)."""

    cache: ReadCache | None
    heads: MemoryHeads
    store: MemoryStore
    spec: CollectionSpec
    flagged: bool


Hits = list[tuple[Memory, float]]
LIVE = Filter("valid_to == 0")


def has_earlier(repository: ArchiveSource, tenant: str, namespace: Namespace) -> bool:
    """Return True when the user may have archived messages in another conversation with the agent (a user's
    first conversation: False, from the member pages, so it searches nothing more)."""
    user = namespace.user_id
    if not user or repository.heads.user_empty(tenant, namespace.agent_id, user, "turns"):
        return False
    archive = repository.heads.user_member_ids(tenant, namespace.agent_id, user, "turns")
    own = repository.heads.member_ids(tenant, namespace) if archive else None
    if archive is None or own is None:
        return archive is None  # not kept (a server): the store's search answers
    if len(archive) > len(own):  # more messages than the conversation reads at all: some are another's
        return True
    known = set(own)
    return any(member not in known for member in archive)


# English function words only: STOP_EN's verbs and adverbs of time ("go", "think", "before", "again") say what a
# question is about (LoCoMo dev with all of STOP_EN left out: 85.1 / 89.7 / 93.5 at 1k / 2k / 4k).
FUNCTION_EN = STOP_EN - frozenset("""
go going like get got think know tell told said say says much many one something thing things kind lot sure well
way before after again once during until above below against between through further more most few same other own
off over under out up down now then only very too also ever still really no not nor
""".split())


def archive_query(text: str) -> str:
    """Return what the archive is searched for: the text's BM25 tokens without function words or punctuation."""
    return " ".join(token for token in bm25_tokens(text)
                    if token not in STOP_ZH and token not in FUNCTION_EN and any(char.isalnum() for char in token))


def earlier_filter(tenant: str, namespace: Namespace) -> Filter:
    """Return the store's filter of the user's live archived messages of their other conversations."""
    return tenant_filter(tenant).and_(Filter(
        'agent_id == {earlier_agent} and kind == "turn" and user_id == {earlier_user} and '
        'session_id != {earlier_session} and valid_to == 0',
        {"earlier_agent": namespace.agent_id, "earlier_user": namespace.user_id or "",
         "earlier_session": namespace.session_id}))


def earlier_hits(repository: ArchiveSource, tenant: str, namespace: Namespace, text: str,
                 vector: list[float] | None, limits: tuple[int, int], distinct: bool) -> tuple[Hits, Hits]:
    """Return the BM25 and dense hits (best first, at most `limits` each) among the user's archived messages of
    their other conversations with the agent."""
    text_limit, dense_limit = limits
    text = archive_query(text)
    if repository.cache is not None:
        held = tenant_filter(tenant).and_(LIVE)  # the same filter in every conversation: the index keeps its mask
        index = repository.cache.group_index((tenant, namespace.agent_id, user_turns_group(namespace.user_id or "")),
                                             held)
        if index is not None:
            dense = held.and_(EMBEDDED) if repository.flagged else held
            own = namespace.session_id
            # The conversation's own messages are dropped after the search: fetch as many more as it may hold.
            text_hits = [hit for hit in index.search_text(text, held, text_limit * 2, distinct=distinct)
                         if hit[0].session_id != own][:text_limit] if text else []
            dense_hits = [hit for hit in index.search_dense(vector, dense, dense_limit * 2, distinct=distinct)
                          if hit[0].session_id != own][:dense_limit] if vector is not None else []
            return text_hits, dense_hits
    where = earlier_filter(tenant, namespace)
    fetch = DISTINCT_FETCH if distinct else 1
    store = repository.store
    text_hits = as_hits(store.search_text(repository.spec.name, text, where=where, fields=OUTPUT_FIELDS,
                                          limit=min(text_limit * fetch, QUERY_WINDOW))) if text else []
    dense_where = where.and_(EMBEDDED) if repository.flagged else where
    dense_hits = as_hits(store.search_dense(
        repository.spec.name, vector, where=dense_where, fields=OUTPUT_FIELDS,
        limit=min(dense_limit * fetch, QUERY_WINDOW))) if vector is not None else []
    if distinct:
        return one_per_text(text_hits, text_limit), one_per_text(dense_hits, dense_limit)
    return text_hits, dense_hits


def with_earlier(repository: ArchiveSource, tenant: str, namespace: Namespace, text: str,
                 vector: list[float] | None, limits: tuple[int, int], distinct: bool,
                 hits: tuple[Hits, Hits]) -> tuple[Hits, Hits]:
    """Return the conversation's own BM25 and dense hits with the user's earlier conversations' merged in (each list
    best first, at most its limit): ranked with the conversation's own (issue 48)."""
    more_text, more_dense = earlier_hits(repository, tenant, namespace, text, vector, limits, distinct)
    return (merged_hits([hits[0], more_text], limits[0], distinct),
            merged_hits([hits[1], more_dense], limits[1], distinct))


def earlier_at(cache: ReadCache | None, tenant: str, namespace: Namespace,
               places: Iterable[tuple[str, int]]) -> list[Memory] | None:
    """Return the user's live archived messages at these (session id, turn) places, from the index of their
    archive, in stored order (None: not held; each conversation's own archive answers)."""
    if cache is None or not namespace.user_id:
        return None
    key = (tenant, namespace.agent_id, user_turns_group(namespace.user_id))
    index = cache.group_index(key, tenant_filter(tenant).and_(LIVE))
    return None if index is None else index.at_places(places)


def as_hits(hits: list[Hit]) -> Hits:
    """Return a store search's hits as (memory, score), in its order."""
    return [(from_record({"id": hit.id, **hit.record}), hit.score) for hit in hits]
