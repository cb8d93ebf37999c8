"""The in-process indexes a Lite file's reads of a namespace are answered from: its session's and its user's.

A session's index (local_index.py) holds every row the session can read, kept current by the writes; with a user_id,
the user's rows are in an index of their own, shared by every conversation of the user (issue 48). A read is
answered from them only while both are held; otherwise the store answers, as before.
"""

from __future__ import annotations

from acn.common.models import Memory, Namespace
from acn.storage.database.base import Filter, Record
from acn.storage.database.lite.local_index import LocalIndex
from acn.storage.database.lite.read_cache import ReadCache
from acn.storage.database.lite.sizes import STORE_ROWS_PER_LOADED_ROW
from acn.storage.database.memory_rows import for_user_rows, one_per_text, user_group

Hits = list[tuple[Memory, float]]


class HeldIndexes:
    """Finds the indexes that answer a namespace's reads in a read cache, waiting for a load where it must."""

    def __init__(self, cache: ReadCache) -> None:
        self.cache = cache

    def of(self, tenant: str, namespace: Namespace, where: Filter | None = None, *,
           wait: bool = False) -> list[LocalIndex] | None:
        """Return the in-process indexes of what a namespace reads: its session's and, with a user_id, its user's
        (held once for every conversation of the user: a new conversation reads no row of the user's); None while
        either is not held (the store answers).

        With `wait` (a search while this process has not searched the store: Lite's search structures are not
        built), an index that loads in the background is waited for instead: answering from the store would build
        those structures over every row, for one call (bounded: PREWARM_WAIT). Unless the store is small beside
        the session (store_sooner, asked only when there is a load to wait for): then the store answers while the
        load runs, the start-up warmer's included. Other reads (a dedup pool's rows, a filtered list) are answered
        by a query meanwhile, as before: a query builds nothing.
        """
        cache = self.cache
        sooner = (lambda: self.store_sooner(tenant, namespace)) if wait else None
        index = cache.local_index(tenant, namespace, where, store_sooner=sooner)
        if index is None and wait and not self.store_sooner(tenant, namespace) and \
                cache.wait_loaded((tenant, namespace.agent_id, namespace.session_id)):
            index = cache.local_index(tenant, namespace, where)
        if index is None or not namespace.user_id:
            return None if index is None else [index]
        key = (tenant, namespace.agent_id, user_group(namespace.user_id))
        users = cache.group_index(key, where, store_sooner=sooner)
        if users is None and wait and not self.store_sooner(tenant, namespace) and cache.wait_loaded(key):
            users = cache.group_index(key, where)
        return None if users is None else [index, users]

    def store_sooner(self, tenant: str, namespace: Namespace) -> bool:
        """Return True when a first search of the store (this process has not searched it) answers a search of the
        session sooner than its index, loading or to load: Lite's first search builds its search structures over
        every row of the collection, a load reads the session's rows one by one (STORE_ROWS_PER_LOADED_ROW). A small
        store of one large session (bench.peer's 10k namespace): the store; many sessions: the load."""
        listed = self.cache.member_ids((tenant, namespace.agent_id, namespace.session_id))
        stored = self.cache.stored_rows() if listed else None
        return listed is not None and stored is not None and stored < len(listed) * STORE_ROWS_PER_LOADED_ROW


def each(indexes: list[LocalIndex], where: Filter) -> list[tuple[LocalIndex, Filter]]:
    """Return each held index with the filter it evaluates: the session's as given, the user's (the second) with the
    session ids blanked (memory_rows.for_user_rows: its answers are kept across the user's conversations)."""
    return [(index, where if position == 0 else for_user_rows(where)) for position, index in enumerate(indexes)]


def merged_hits(lists: list[Hits], limit: int, distinct: bool) -> Hits:
    """Return the hits of several indexes (a session's and its user's) as one list, best first, at most `limit`
    (one per text when `distinct`). One list is returned as it is: a namespace without a user ranks as before."""
    if len(lists) == 1:
        return lists[0]
    hits = sorted((hit for hits in lists for hit in hits), key=lambda hit: -hit[1])
    return one_per_text(hits, limit) if distinct else hits[:limit]


def held_page(indexes: list[LocalIndex], where: Filter, *, offset: int, limit: int) -> list[Memory]:
    """Return one page of the rows the indexes hold that match, oldest first (as the store's query answers)."""
    if len(indexes) == 1:
        return indexes[0].select_page(where, offset=offset, limit=limit)
    merged = [m for index, where_here in each(indexes, where)
              for m in index.select_page(where_here, offset=0, limit=offset + limit)]
    return sorted(merged, key=lambda m: (m.created_at, m.id))[offset: offset + limit]


def held_rows(indexes: list[LocalIndex], where: Filter, fields: list[str]) -> list[Record]:
    """Return the rows (these fields) the indexes hold that match, as the store's query_all answers them."""
    return [record for index, where_here in each(indexes, where) for record in index.records(where_here, fields)]


def held_search(indexes: list[LocalIndex], text_queries: tuple[str, str], vector: list[float] | None, where: Filter,
                dense_where: Filter, limits: tuple[int, int], distinct: bool) -> tuple[Hits, Hits]:
    """Return the BM25 and dense hits of the indexes (limits: text, dense), merged across them. `text_queries`: what
    the session's index is searched for, then the user's (the second: the input's content words, as the user's
    archive is searched: repositories/user_archive.py)."""
    text_limit, vector_limit = limits
    text_hits = merged_hits([index.search_text(text_queries[min(at, 1)], where_here, text_limit, distinct=distinct)
                             for at, (index, where_here) in enumerate(each(indexes, where))], text_limit, distinct)
    dense_hits = merged_hits([index.search_dense(vector, where_here, vector_limit, distinct=distinct)
                              for index, where_here in each(indexes, dense_where)],
                             vector_limit, distinct) if vector is not None else []
    return text_hits, dense_hits
