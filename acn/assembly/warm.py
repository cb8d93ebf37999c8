"""The reads an assemble and a record_turn make of a session, made once by the start-up warmer (memory/warmer.py).

On a Lite file a session's in-process index answers each filter by testing every row once, then keeps the result
(LocalIndex._mask, kept current by the writes): measured on a warmed 5k-row namespace, the first assemble spent
~90 % of its 0.9 s testing three filters (what is in force, what was superseded, what may be searched), the second
none. Made here before the first call, with the filters assemble itself builds; nothing is written.
"""

from __future__ import annotations

from typing import get_args

from acn.assembly.current import stale_values
from acn.assembly.standing import FOCUSED_KINDS, STANDING_KINDS, STANDING_LIMIT
from acn.common.models import MemoryKind, Namespace
from acn.retrieval.rank import MemoryRetrieveRequest
from acn.storage.memories import MemoryRepository

WARM_QUERY = "warm"  # any text: the search's filter, not its result, is what is kept


def warm_reads(memories: MemoryRepository, tenant: str, namespace: Namespace) -> None:
    """Make the reads a focused assemble makes of the namespace (standing memories, stale values, the search's
    filter) so that their results are kept before its first call."""
    # The session's archived messages by turn (record_turn's dedup of messages, neighbour expansion): a Lite file
    # keeps them per session once read from its index.
    memories.archived_messages(tenant, namespace, [0])
    for kinds in (FOCUSED_KINDS, STANDING_KINDS):  # a focused assemble's standing memories, a snapshot's
        memories.standing(tenant, namespace, kinds, limit=STANDING_LIMIT)
    stale_values(memories, tenant, namespace)
    # As recall.ranked builds it (every kind: focused), and as a snapshot's retrieve does (kinds None: no turns);
    # the request's default scopes.
    every: list[MemoryKind] = list(get_args(MemoryKind))
    for wanted in (every, None):
        request = MemoryRetrieveRequest(agent_id=namespace.agent_id, session_id=namespace.session_id,
                                        user_id=namespace.user_id, query=WARM_QUERY, kinds=wanted)
        memories.search_readable(tenant, request, WARM_QUERY, scopes=request.scopes,
                                 include_superseded=request.include_superseded, kinds=request.kinds, limit=1)
