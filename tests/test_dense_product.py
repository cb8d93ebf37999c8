"""The in-process index's dense product (acn/storage/database/lite/dense_rows.py: inner_products)."""

from __future__ import annotations

import numpy as np
import pytest

from acn.storage.database.base import Filter
from acn.storage.database.lite.dense_rows import dense_kernel, inner_products, unit_vector
from acn.storage.database.lite.local_index import LocalIndex
from tests.test_assemble_cost import memory_of

DIM = 512


def unit_rows(count: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.asarray([unit_vector(row, DIM) for row in rng.standard_normal((count, DIM))], dtype=np.float32)


def test_each_rows_score_is_its_inner_product_with_the_query() -> None:
    rows, query = unit_rows(700, 1), unit_rows(1, 2)[0]
    scores = inner_products(rows, query)
    assert scores.dtype == np.float32 and scores.shape == (700,)
    exact = rows.astype(np.float64) @ query.astype(np.float64)
    assert float(np.abs(scores - exact).max()) < 1e-6
    assert inner_products(rows[:0], query).shape == (0,)


def test_a_rows_score_is_the_same_to_the_bit_in_any_subset_of_the_rows() -> None:
    # A kept copy of the rows a filter allows, the index's own vectors, a fresh index: each scores a row alike.
    rows, query = unit_rows(1000, 3), unit_rows(1, 4)[0]
    whole = inner_products(rows, query)
    picked = np.asarray([3, 4, 5, 17, 256, 257, 999])
    assert inner_products(np.ascontiguousarray(rows[picked]), query).tolist() == whole[picked].tolist()
    assert inner_products(rows[5:9], query).tolist() == whole[5:9].tolist()


def test_a_strided_or_other_typed_input_is_scored_by_numpy() -> None:
    rows, query = unit_rows(50, 5), unit_rows(1, 6)[0]
    columns = np.asfortranarray(rows)  # not C-contiguous: the kernel reads rows end to end
    assert inner_products(columns, query).tolist() == (columns @ query).tolist()
    doubles = rows.astype(np.float64)
    assert inner_products(doubles, query.astype(np.float64)).tolist() == (doubles @ query.astype(np.float64)).tolist()


def test_the_kernel_is_faiss_which_milvus_lite_ships() -> None:
    pytest.importorskip("faiss")
    kernel = dense_kernel()
    assert kernel is not None and kernel.__name__ == "faiss"


def test_a_dense_search_ranks_by_the_kernels_scores() -> None:
    rows, query = unit_rows(300, 7), unit_rows(1, 8)[0]
    index = LocalIndex(DIM)
    for n, row in enumerate(rows):
        index.put(memory_of(f"mem_{n:04x}", "fact"), {"id": f"mem_{n:04x}", "kind": "fact", "dense": row.tolist()})
    found = index.search_dense(query.tolist(), Filter('kind == "fact"'), 10)
    kept = np.asarray([unit_vector(row.tolist(), DIM) for row in rows], dtype=np.float32)  # as put keeps them
    scores = inner_products(kept, unit_vector(query.tolist(), DIM))
    best = np.argsort(-scores, kind="stable")[:10]
    assert [(memory.id, score) for memory, score in found] == [(f"mem_{n:04x}", float(scores[n])) for n in best]
