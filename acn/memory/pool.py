"""The live memories a write batch can collide with: loaded once, indexed (memory.dedup_index), saved once."""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence

from acn.common.errors import ConflictError
from acn.common.models import Memory, Namespace
from acn.memory.dedup_index import KNOWN_FIELDS, DedupIndex, Known, best_of, known, numbers_conflict
from acn.memory.items import SUPERSEDING_KINDS, MemoryItem
from acn.storage.repositories import MemoryRepository, Stamp, scope_key
from acn.text.similarity import normalise

# How long a row may take from its stamp (now_ms) to landing in the store, for pools other processes write to.
WRITE_LAG_MS = 5_000


class Pool:
    """The live memories a batch can collide with, indexed once (DedupIndex); the batch's writes saved in one upsert.

    With a Lite file the index outlives the batch: parked after a save, it serves the next batch of the same
    namespace and scopes unless a memory the namespace reads was written in between (write_counters.py), so a
    namespace is read once per process, not once per batch, at any size.
    """

    def __init__(self, memories: MemoryRepository, tenant: str, loaded: list[Known] | None,
                 namespace: Namespace | None = None, key: Hashable = None, stamp: Stamp | None = None,
                 scopes: Sequence[str] | None = None) -> None:
        self.memories, self.tenant = memories, tenant
        # A parked pool goes stale when a memory of its scopes that the namespace reads is written (the stamp).
        self.namespace, self.key, self.stamp, self.scopes = namespace, key, stamp, scopes
        self.index = DedupIndex()
        self.pending: dict[str, Memory] = {}
        self.stored: dict[str, Memory] = {}  # full rows read for an update or a supersede
        self.new_ids: set[str] = set()
        self.watermark: int | None = None  # load_shared: rows stamped since then are read again
        self.verify = False  # load_shared: memories answered with are confirmed in the store first
        # id(item) -> (its nearest when the batch was prefetched, at which floor, the index's slot count then):
        # `nearest` then compares the item only with what the batch added since (see there).
        self.early: dict[int, tuple[tuple[float, Known] | None, float, int]] = {}
        self.index.add_all(loaded or [])

    @property
    def live(self) -> dict[str, Known]:
        """The live memories by id (for tests and diagnostics)."""
        return {m.id: m for m in self.index.live()}

    @classmethod
    def load(cls, memories: MemoryRepository, tenant: str, namespace: Namespace, items: list[MemoryItem]) -> Pool:
        scopes = sorted({item.scope for item in items})
        kinds = sorted({item.kind for item in items})
        if not items:
            return cls(memories, tenant, [], namespace)
        if "turn" not in kinds and memories.cache is None:
            return cls.load_shared(memories, tenant, namespace, scopes)
        if "turn" not in kinds:  # every kind but archived messages: the next batch may bring others
            key = ("dedup pool", tenant, namespace.agent_id, scope_key(namespace, scopes))
            parked = memories.kept.unpark(tenant, namespace, key, scopes)
            if isinstance(parked, Pool):
                return parked
            stamp = memories.kept.stamp(tenant, namespace, scopes)
            rows = memories.queries.known_rows(tenant, namespace, scopes, KNOWN_FIELDS)
            return cls(memories, tenant, [known(row) for row in rows], namespace, key, stamp, scopes)
        rows = memories.queries.known_rows(tenant, namespace, scopes, KNOWN_FIELDS, kinds=kinds)
        return cls(memories, tenant, [known(row) for row in rows], namespace)

    @classmethod
    def warm(cls, memories: MemoryRepository, tenant: str, namespace: Namespace, items: list[MemoryItem]) -> Pool:
        """Build (or bring up to date) and keep the pool a batch of these items' scopes would load first (the
        start-up warmer, acn/app/warmer.py): parked as after a batch, under the namespace lock a batch takes."""
        with memories.namespace_lock(tenant, namespace):
            pool = cls.load(memories, tenant, namespace, items)
            pool.park()
        return pool

    @classmethod
    def load_shared(cls, memories: MemoryRepository, tenant: str, namespace: Namespace,
                    scopes: Sequence[str]) -> Pool:
        """Return the pool of a store other processes write too (a server): this process's last pool of the
        namespace brought up to date, else a new one.

        Brought up to date: the rows of the namespace stamped since the pool's watermark (the wall clock when it
        was last read, less WRITE_LAG_MS for a row stamped before that and landing after) are read again: new and
        changed rows go in, closed ones out. A row deleted by another process cannot be seen that way, so every
        memory the pool answers with is confirmed in the store first (`verified`); one that is gone leaves it.
        """
        key = ("shared dedup pool", tenant, namespace.agent_id, scope_key(namespace, scopes))
        read_at = int(time.time() * 1000)
        cached = memories.kept.take_shared(key)
        if isinstance(cached, Pool) and cached.watermark is not None:
            changed = memories.queries.known_rows(tenant, namespace, scopes, [*KNOWN_FIELDS, "valid_to"], live=False,
                                          updated_since=cached.watermark)
            for row in changed:
                if row["valid_to"]:
                    cached.index.remove(row["id"])
                else:
                    cached.index.add(known(row))
            pool = cached
        else:
            rows = memories.queries.known_rows(tenant, namespace, scopes, KNOWN_FIELDS)
            pool = cls(memories, tenant, [known(row) for row in rows], namespace, key)
        pool.watermark = read_at - WRITE_LAG_MS
        pool.verify = True
        return pool

    def prefetch(self, items: list[MemoryItem], floor: float) -> None:
        """Read in one query the full rows the batch will probably change (near-duplicates to update, keys to
        supersede), as they stand before the batch: `full` then finds them here instead of one query each."""
        # Looked up one by one: a set minus a dict's keys view goes over the whole dict (see SessionArchive.absent).
        wanted = {id_ for id_ in self.remember_nearest(items, floor)
                  if id_ not in self.pending and id_ not in self.stored}
        if len(wanted) > 1:  # one is read by `full` as cheaply
            self.stored.update((m.id, m) for m in self.memories.get_many(self.tenant, sorted(wanted))
                               if not m.valid_to)

    def remember_nearest(self, items: list[MemoryItem], floor: float) -> set[str]:
        """Find each item's nearest once, before the batch writes (`nearest` starts from it); return the ids of
        the memories the batch will probably read in full."""
        wanted: set[str] = set()
        mark = len(self.index.slots)
        self.early.clear()  # a kept pool's last batch: ids of its items may be reused by this one's
        for item in items:
            if item.key and item.kind in SUPERSEDING_KINDS:
                wanted.update(m.id for m in self.index.same_key(item.scope, item.kind, item.key))
            found = self.index.nearest(item.scope, item.kind, item.content, floor)
            self.early[id(item)] = (found, floor, mark)
            # A shared pool confirms even an exact duplicate in the store (see verified): read those too. Else only
            # a near-duplicate the item would update is read: one whose numbers the item drops stays as it is
            # (a different fact, write.write_item), and should the batch change that, `full` reads it alone.
            if found is not None and (self.verify or (normalise(found[1].content) != normalise(item.content)
                                                      and not numbers_conflict(found[1].content, item.content))):
                wanted.add(found[1].id)
        return wanted

    def full(self, memory_id: str) -> Memory:
        """Return the complete memory (as this batch left it, else as stored)."""
        if memory_id in self.pending:
            return self.pending[memory_id]
        if memory_id in self.stored:
            return self.stored[memory_id]
        memory = self.memories.get(self.tenant, memory_id)
        if memory is None:
            raise ConflictError(f"memory {memory_id} vanished while writing; retry")
        self.stored[memory_id] = memory
        return memory

    def same_key(self, item: MemoryItem) -> list[Memory]:
        """Return the live memories of this item's scope and kind with the same key."""
        found = self.index.same_key(item.scope, item.kind, item.key or "")
        return [self.full(m.id) for m in found if self.verified(m.id)]

    def nearest(self, item: MemoryItem, floor: float) -> tuple[float, Known] | None:
        """Return the most similar live memory of this item's scope and kind if its similarity reaches floor."""
        while True:
            found = self._nearest(item, floor)
            if found is None or self.verified(found[1].id):
                return found

    def _nearest(self, item: MemoryItem, floor: float) -> tuple[float, Known] | None:
        """Return the index's nearest for the item, from its prefetched answer when that is still good.

        Exact: slots are never changed, only added (a changed memory takes a new slot) and marked dead. So if the
        memory prefetch found still lives at its slot, it is still the best of the slots that existed then (the
        others can only have died), and only the slots added since need comparing; if it died, or the item was
        not prefetched at this floor, the whole index is counted again.
        """
        early = self.early.get(id(item))
        if early is not None and early[1] == floor:
            found, _, mark = early
            if found is None or self.index.get(found[1].id) is found[1]:
                return best_of(found, self.index.nearest_since(item.scope, item.kind, item.content, floor, mark))
        return self.index.nearest(item.scope, item.kind, item.content, floor)

    def verified(self, memory_id: str) -> bool:
        """Return True unless the pool may be stale (load_shared) and the memory is no longer live in the store
        (then it leaves the pool)."""
        if not self.verify or memory_id in self.pending or memory_id in self.stored:
            return True
        memory = self.memories.get(self.tenant, memory_id)
        if memory is None or memory.valid_to:
            self.index.remove(memory_id)
            return False
        self.stored[memory_id] = memory
        return True

    def add(self, *created: Memory) -> None:
        """Record memories created by this batch (inserted, not upserted)."""
        self.new_ids.update(m.id for m in created)
        self.put(*created)

    def put(self, *changed: Memory) -> None:
        """Record new or changed memories (closed ones leave the live pool)."""
        for memory in changed:
            self.pending[memory.id] = memory
            self.stored.pop(memory.id, None)
            if memory.valid_to:
                self.index.remove(memory.id)
            else:
                self.index.add(known(memory))

    def save(self, carry: Sequence[Memory] = (), carry_new: set[str] | None = None) -> None:
        """Write everything pending in one upsert, with `carry`: rows no pool holds (record_turn's archived
        messages, `carry_new` the ids among them to insert) saved in the same write."""
        if self.pending or carry:
            written = list(self.pending.values())
            self.memories.save(self.tenant, [*carry, *written], new_ids=self.new_ids | (carry_new or set()))
            self.pending, self.new_ids = {}, set()
            if self.stamp is not None and self.namespace is not None:
                # This write is reflected here (the counters move as the repository moves them); any other
                # write since the load is not, and makes the stamps differ.
                self.stamp = self.memories.kept.moved(self.stamp, self.tenant, self.namespace, written, self.scopes)

    def park(self) -> None:
        """Keep the index for the next batch (only if it is complete and nothing else wrote meanwhile)."""
        self.early.clear()
        if self.watermark is not None and not self.pending:
            self.stored.clear()
            self.memories.kept.keep_shared(self.key, self)
            return
        if self.stamp is not None and self.namespace is not None and not self.pending:
            self.stored.clear()
            self.memories.kept.park(self.tenant, self.namespace, self.key, self, self.stamp, self.scopes)

    def nbytes(self) -> int:
        """Return an estimate of the memory a parked pool holds."""
        return self.index.nbytes()
