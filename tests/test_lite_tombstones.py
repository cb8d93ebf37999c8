"""Milvus Lite's tombstones are shared with its readers, copied only when a flush or a compaction changes them
(acn/storage/database/lite/tombstones.py, issue 47): a read costs the same whatever the collection has deleted, and
what a read took never changes under it. Behaviour, not timings (bench/lite_tombstones.py has the figures)."""

from __future__ import annotations

import gc
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from acn.common.models import Namespace
from acn.storage.database.lite.tombstones import share_tombstone_snapshots
from acn.storage.database.memory_rows import scope_filter
from acn.storage.database.milvus import MilvusStore
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import ENGINE
from tests.test_store import memories_of

pytestmark = pytest.mark.skipif(bool(ENGINE), reason="the C++ Milvus Lite keeps its tombstones its own way")


def deletes(*pairs: tuple[str, int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({"id": [pk for pk, _ in pairs], "_seq": [seq for _, seq in pairs]})


def test_a_reader_shares_the_map_and_keeps_what_it_took() -> None:
    from milvus_lite.storage.delta_index import DeltaIndex

    assert share_tombstone_snapshots() and share_tombstone_snapshots()  # idempotent
    live = DeltaIndex("id")
    live.add_batch(deletes(("a", 5), ("b", 7)))
    first, second = live.frozen_copy(), live.frozen_copy()
    assert first._map is live._map and second._map is live._map  # no copy a read

    live.add_batch(deletes(("c", 9), ("a", 11)))  # a flush folds new deletes in: the readers' map stays
    assert first._map is not live._map
    assert not first.is_deleted("c", 1) and not first.is_deleted("a", 6) and first.is_deleted("a", 4)
    assert live.is_deleted("c", 1) and live.is_deleted("a", 6) and len(live) == 3

    third = live.frozen_copy()
    assert live.gc_below(8) == 1  # a compaction collects "b" (7): the reader that took it before still has it
    assert third.is_deleted("b", 6) and not live.is_deleted("b", 6) and len(third) == 3 and len(live) == 2
    unshared = live._map
    live.add_batch(deletes(("d", 12)))  # nobody took the map since: it is changed in place
    assert live._map is unshared and live.is_deleted("d", 11)


def test_a_lite_file_reads_through_shared_tombstones_and_hides_what_it_deleted(tmp_path: Path) -> None:
    from milvus_lite.engine.collection import Collection
    from milvus_lite.storage.delta_index import DeltaIndex

    store = MilvusStore(str(tmp_path / "memory.db"), flush_every=50).open()
    try:
        assert getattr(DeltaIndex, "_acn_copy_on_write", False)  # opening a Lite file shares them
        repository = MemoryRepository(store, prefix="t" + uuid.uuid4().hex[:8], embedder=None)
        repository.open()
        ns = Namespace(agent_id="a", session_id="s")
        ids = memories_of(ns, [f"ticket {n} is open" for n in range(80)], repository)
        store.flushes.flush_locked()
        repository.delete_ids("t1", ids[:60])
        store.flushes.flush_locked()
        assert repository.count("t1", scope_filter(ns)) == 20
        assert {h.memory.id for h in repository.search("t1", "ticket 7 is open", scope_filter(ns), limit=80)} \
            <= set(ids[60:])
        collection = next(o for o in gc.get_objects()
                          if isinstance(o, Collection) and o._name == repository.spec.name)  # noqa: SLF001
        live = collection._delta_index  # noqa: SLF001 - what each read snapshots
        assert len(live) >= 60
        _, first = collection._read_snapshot()  # noqa: SLF001
        _, second = collection._read_snapshot()  # noqa: SLF001
        assert first._map is live._map and second._map is live._map  # no copy a read
    finally:
        store.close()
