"""The live memories a write batch can collide with: loaded once, indexed by character bigrams, saved once."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from common.errors import ConflictError
from common.models import (
    Memory,
    MemoryKind,
    Namespace,
)
from memory.items import MemoryItem
from storage.base import Filter
from storage.memories import MemoryRepository
from storage.memory_rows import kinds_filter, live_filter, scope_filter, tenant_filter
from storage.read_cache import Stamp
from text.similarity import shingle_similarity, shingles

DEDUPE_CANDIDATES = 5
# A batch loads the namespace's live memories of its kinds once when there are at most this many.
POOL_LIMIT = 2000


@dataclass(frozen=True)
class Known:
    """What dedup needs of a stored memory; the full row is read only for the few that change."""

    id: str
    content: str
    scope: str
    kind: MemoryKind
    key: str | None
    version: int


KNOWN_FIELDS = ["id", "content", "scope", "kind", "key", "version"]


def known(memory: Memory | dict[str, Any]) -> Known:
    """Return the dedup view of a memory or of a light store row."""
    if isinstance(memory, Memory):
        return Known(memory.id, memory.content, memory.scope, memory.kind, memory.key, memory.version)
    return Known(memory["id"], memory["content"], memory["scope"], memory["kind"], memory["key"] or None,
                 int(memory["version"]))


class Pool:
    """The live memories a batch can collide with, loaded in one query; the batch's writes saved in one upsert.

    Near-duplicates are found through an inverted index of character bigrams, so a batch of n items against
    m stored memories costs the postings it touches, not n × m comparisons. A namespace too large to load
    (more than POOL_LIMIT rows of the batch's kinds) falls back to a BM25 search and a save per item.
    """

    def __init__(self, memories: MemoryRepository, tenant: str, loaded: list[Known] | None,
                 namespace: Namespace | None = None, key: Hashable = None, stamp: Stamp | None = None) -> None:
        self.memories, self.tenant = memories, tenant
        self.exhaustive = loaded is not None
        # With a Lite file an index of every kind outlives the batch: parked after a save, it serves the next
        # batch of the same namespace and scopes unless another write to the agent (or to the shared scope)
        # happened in between.
        self.namespace, self.key, self.stamp = namespace, key, stamp
        self.live: dict[str, Known] = {}
        self.grams: dict[str, frozenset[str]] = {}
        self.postings: dict[tuple[str, str, str], set[str]] = defaultdict(set)
        self.pending: dict[str, Memory] = {}
        self.stored: dict[str, Memory] = {}  # full rows as stored, when the pool loaded them
        self.new_ids: set[str] = set()
        for memory in loaded or []:
            self._index(memory)

    @classmethod
    def load(cls, memories: MemoryRepository, tenant: str, namespace: Namespace, items: list[MemoryItem]) -> Pool:
        scopes = sorted({item.scope for item in items})
        kinds = sorted({item.kind for item in items})
        live = scope_filter(namespace, scopes).and_(live_filter(False))
        if items and "turn" not in kinds:  # every kind but archived messages: the next batch may bring others
            key = ("dedup pool", tenant, namespace.agent_id, live.cache_key())
            parked = memories.unpark(tenant, namespace.agent_id, key)
            if isinstance(parked, Pool):
                return parked
            stamp = memories.stamp(tenant, namespace.agent_id)
            # Whole rows: a supersede or an update needs the full memory, and a lookup by id scans a large
            # Lite collection (~150 ms at 100k rows).
            found = memories.find(tenant, live.and_(kinds_filter(None, exclude_turns=True)), limit=POOL_LIMIT + 1,
                                  within=namespace)
            if len(found) <= POOL_LIMIT:
                pool = cls(memories, tenant, [known(m) for m in found], namespace, key, stamp)
                pool.stored = {m.id: m for m in found}
                return pool
        where = live.and_(kinds_filter(kinds, exclude_turns=False))
        rows = memories.store.query(memories.spec.name, tenant_filter(tenant).and_(where), fields=KNOWN_FIELDS,
                                    limit=POOL_LIMIT + 1) if items else []
        return cls(memories, tenant, [known(row) for row in rows] if len(rows) <= POOL_LIMIT else None, namespace)

    def full(self, memory_id: str) -> Memory:
        """Return the complete memory (as this batch left it, else as stored)."""
        if memory_id in self.pending:
            return self.pending[memory_id]
        if memory_id in self.stored:
            return self.stored[memory_id]
        memory = self.memories.get(self.tenant, memory_id)
        if memory is None:
            raise ConflictError(f"memory {memory_id} vanished while writing; retry")
        return memory

    def same_key(self, item: MemoryItem) -> list[Memory]:
        """Return the live memories of this item's scope and kind with the same key."""
        if not self.exhaustive:
            return [m for m in self.memories.find(self.tenant, self._own(item), limit=100, within=self._namespace())
                    if m.key == item.key]
        return [self.full(m.id) for m in self.live.values()
                if m.scope == item.scope and m.kind == item.kind and m.key == item.key]

    def nearest(self, item: MemoryItem, floor: float) -> tuple[float, Known] | None:
        """Return the most similar live memory of this item's scope and kind if its similarity reaches floor."""
        target = shingles(item.content)
        if not self.exhaustive:
            found = [known(s.memory) for s in self.memories.search(self.tenant, item.content, self._own(item),
                                                                    limit=DEDUPE_CANDIDATES,
                                                                    within=self._namespace())]
            scored = [(shingle_similarity(shingles(m.content), target), m) for m in found]
            best_found = max(scored, key=lambda pair: pair[0], default=None)
            return best_found if best_found is not None and best_found[0] >= floor else None
        if not target:
            return None
        # Prefix filter: Dice >= floor needs an overlap of at least floor·|A|/(2 − floor) of the item's |A|
        # grams, so such a memory holds one of any |A| − overlap + 1 of them. Only the postings of the rarest
        # are read (common bigrams have postings as long as the pool); each candidate is then scored exactly.
        postings = sorted((self.postings.get((item.scope, item.kind, gram), ()) for gram in target), key=len)
        needed = max(1, math.ceil(floor * len(target) / (2 - floor) - 1e-9))
        candidates: set[str] = set().union(*postings[: len(target) - needed + 1])
        scored_ids = ((2 * len(target & self.grams[mid]) / (len(target) + len(self.grams[mid])), mid)
                      for mid in candidates)
        score, best = max(scored_ids, default=(0.0, ""))  # ties go to one fixed memory: the greatest id
        return (score, self.live[best]) if best and score >= floor else None

    def add(self, *created: Memory) -> None:
        """Record memories created by this batch (inserted, not upserted)."""
        self.new_ids.update(m.id for m in created)
        self.put(*created)

    def put(self, *changed: Memory) -> None:
        """Record new or changed memories (closed ones leave the live pool)."""
        for memory in changed:
            self.pending[memory.id] = memory
            self._unindex(memory.id)
            if not memory.valid_to:
                self._index(known(memory))
        if not self.exhaustive:
            self.save()

    def save(self) -> None:
        """Write everything pending in one upsert."""
        if self.pending:
            written = list(self.pending.values())
            self.memories.save(self.tenant, written, new_ids=self.new_ids)
            if self.stamp is not None:  # a parkable pool keeps what it wrote as the stored rows
                self.stored.update(self.pending)
            self.pending, self.new_ids = {}, set()
            if self.stamp is not None and self.namespace is not None:
                # This write is reflected here (the counters move as the repository moves them); any other
                # write since the load is not, and makes the stamps differ.
                epoch, agent, shared = self.stamp
                self.stamp = (epoch, agent + any(m.agent_id == self.namespace.agent_id for m in written),
                              shared + any(m.scope == "shared" for m in written))

    def park(self) -> None:
        """Keep the index for the next batch (only if it is complete and nothing else wrote meanwhile)."""
        if self.stamp is not None and self.namespace is not None and not self.pending \
                and len(self.live) <= POOL_LIMIT:
            self.memories.park(self.tenant, self.namespace.agent_id, self.key, self, self.stamp)

    def _index(self, memory: Known) -> None:
        grams = shingles(memory.content)
        self.live[memory.id], self.grams[memory.id] = memory, grams
        for gram in grams:
            self.postings[(memory.scope, memory.kind, gram)].add(memory.id)

    def _unindex(self, memory_id: str) -> None:
        old = self.live.pop(memory_id, None)
        if old is not None:
            for gram in self.grams.pop(memory_id):
                self.postings[(old.scope, old.kind, gram)].discard(memory_id)

    def _namespace(self) -> Namespace:
        if self.namespace is None:
            raise RuntimeError("a pool that searches the store needs its namespace")
        return self.namespace

    def _own(self, item: MemoryItem) -> Filter:
        """Return the filter of the live memories this item can collide with: its kind, in its scope of this
        namespace (another agent's or session's memories never count as duplicates)."""
        return (scope_filter(self._namespace(), [item.scope]).and_(live_filter(False))
                .and_(kinds_filter([item.kind], exclude_turns=False)))
