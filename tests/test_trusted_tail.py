"""The search tail (issue 35): a session written in bulk has its in-process index loaded before its first search.

Until a session's index is loaded its searches go to the store, beside the loader: at 10k rows in one namespace
that window was the whole of memory_retrieve's p95 (94 ms against a 3.6 ms median; bench/tail.py). The figures are
the benchmark's; this test checks the mechanism: no read is needed to start the load.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from acn.common.models import Memory
from acn.server import create_app
from acn.storage.database.lite.read_cache import WARM_ON_WRITE
from acn.storage.database.memory_rows import new_memory_id
from tests.conftest import ENGINE, make_settings


def memories(agent: str, session: str, count: int) -> list[Memory]:
    now = int(time.time() * 1000)
    return [Memory(id=new_memory_id(), kind="fact", content=f"fact number {i} about the rollout", importance=5,
                   scope="session", agent_id=agent, session_id=session, created_at=now, updated_at=now, version=1)
            for i in range(count)]


def test_a_session_written_in_bulk_loads_its_index_before_any_read(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    repository = app.extensions["acn"].memories
    try:
        if ENGINE or repository.cache is None:
            pytest.skip("the engine run keeps no in-process index")
        repository.save("default", memories("bulk", "s1", WARM_ON_WRITE))
        repository.save("default", memories("few", "s1", WARM_ON_WRITE - 1))  # a turn's few rows: on first read
        assert repository.cache.settle()
        indexed = set(repository.cache.indexes)
        assert ("default", "bulk", "s1") in indexed and ("default", "few", "s1") not in indexed
        # Later batches land in the loaded index (no second load, nothing missed).
        repository.save("default", memories("bulk", "s1", 3))
        assert len(repository.cache.indexes[("default", "bulk", "s1")]) == WARM_ON_WRITE + 3
    finally:
        app.extensions["acn"].close()
