"""bench/lite_index_cost.py and bench/lite_tombstones.py on tiny runs: a table row a block or step, Lite's index builds
counted, its factory put back.

Behaviour, not timings (the figures are in docs/benchmarks.md, issue 47).
"""

from __future__ import annotations

import milvus_lite.index.factory as factory
import numpy as np
from milvus_lite.index.spec import IndexSpec

from bench.lite_index_cost import index_builds, run


def test_index_builds_are_counted_and_the_factory_is_put_back() -> None:
    original = factory.build_index_from_spec
    vectors = np.random.default_rng(0).standard_normal((2000, 64)).astype(np.float32)
    with index_builds() as built:
        factory.build_index_from_spec(IndexSpec("dense", "HNSW", "COSINE", {"M": 16, "efConstruction": 200}), vectors)
        assert built[0] > 0
    assert factory.build_index_from_spec is original


def test_the_bench_prints_a_row_a_block_and_the_whole_run() -> None:
    text = run(chats=2, rounds=3, block=2, embedder="none")
    assert "| 1–2 |" in text and "| 3–3 |" in text
    assert "s of it in Lite's index builds." in text
    assert factory.build_index_from_spec.__module__ == "milvus_lite.index.factory"


def test_the_tombstone_bench_prints_a_row_a_step() -> None:
    from bench.lite_tombstones import run as tombstones

    text = tombstones(deleted=6, step=3)
    assert "| 0 |" in text and "| 3 |" in text and "| 6 |" in text
