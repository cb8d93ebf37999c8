"""Milvus Lite's tombstones, shared with its readers instead of copied for each read (issue 47).

Lite 3 keeps a tombstone (primary key -> sequence number of its delete) for every key deleted from a collection
until no data file could hold an older copy of it, and every `get`, `query` and `search` first takes a frozen copy
of the whole map (`DeltaIndex.frozen_copy`, a dict copy under the collection's maintenance lock), so that a flush or
a compaction changing the map meanwhile does not change what the read sees. A row written once and never again (a
finished session's state) keeps the oldest data file's first sequence number low, so from then on no tombstone is
collected: the sessions collection deletes a key a version (the prune of old versions), and its map grows by about
one entry a turn of every session the store has served. `python -m bench.lite_tombstones`: a primary-key get
1.7 ms with no key deleted, 11.2 ms after 200,000 (2026-12-07); a dict of 1,000,000 keys takes ~70 ms to copy.

The same isolation without the copy: copy on write. A frozen copy shares the live map and marks it shared; the
map's writers (a flush's `add_batch`, a compaction's `gc_below`) replace a shared map by a copy before changing it.
Frozen copies and those writes all run under the collection's maintenance lock (milvus_lite/engine/collection.py),
so a reader's map is never changed after it took it, and a read costs the same whatever the store has deleted; a
flush after reads pays one copy.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("acn.store")

_SHARED = "_acn_shared"  # set on a DeltaIndex whose map a frozen copy holds


def share_tombstone_snapshots() -> bool:
    """Make Milvus Lite's frozen tombstone copies share the map (copy on write); return whether this Lite has the
    DeltaIndex the change is written for (another version keeps its own copies). Idempotent."""
    try:
        # The package first: importing the submodule alone holds its import lock while it waits for the package's,
        # and a start-up thread importing the package (runtime.py's jieba warm-up) waits for the submodule's: the
        # interpreter breaks that deadlock by failing one of the two imports.
        import milvus_lite  # noqa: F401
        from milvus_lite.storage.delta_index import DeltaIndex
    except ImportError:  # the C++ Lite, or no Lite: nothing to change
        return False
    if getattr(DeltaIndex, "_acn_copy_on_write", False):
        return True
    if not all(hasattr(DeltaIndex, name) for name in ("frozen_copy", "add_batch", "gc_below")) or \
            not hasattr(DeltaIndex("id"), "_map"):
        log.info("milvus-lite's DeltaIndex is not the one tombstones.py knows: its reads copy the map as before")
        return False
    add_batch, gc_below = DeltaIndex.add_batch, DeltaIndex.gc_below

    def frozen_copy(self: Any) -> Any:
        copy = DeltaIndex.__new__(DeltaIndex)
        copy.__dict__.update(self.__dict__)  # the same map (and key name), read only by its holder
        setattr(self, _SHARED, True)
        setattr(copy, _SHARED, True)  # were the copy ever written to, it would copy first too
        return copy

    def own(self: Any) -> None:
        if getattr(self, _SHARED, False):
            self._map = dict(self._map)
            setattr(self, _SHARED, False)

    def shared_add_batch(self: Any, batch: Any) -> None:
        if batch.num_rows:
            own(self)
        add_batch(self, batch)

    def shared_gc_below(self: Any, min_active_data_seq: int) -> int:
        if any(seq < min_active_data_seq for seq in self._map.values()):
            own(self)
        return int(gc_below(self, min_active_data_seq))

    DeltaIndex.frozen_copy = frozen_copy
    DeltaIndex.add_batch = shared_add_batch
    DeltaIndex.gc_below = shared_gc_below
    DeltaIndex._acn_copy_on_write = True
    return True
