"""The vectors a dense filter allows, kept between searches of the in-process index (local_index.py).

A session's dense searches ask with the same filter turn after turn; the rows it allows are gathered once into a
buffer with room after them, and rows added later are appended, not gathered again.
"""

from __future__ import annotations

from array import array
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np


@dataclass(frozen=True)
class DenseRows:
    """The vectors one dense filter allows, in slot order: the first len(allowed) rows of `buffer` (room after
    them for rows added later), as of the index's `writes`-th put and `seen` entries of its change log."""

    key: Hashable
    writes: int
    seen: int
    allowed: np.ndarray
    buffer: np.ndarray


def dense_rows_of(kept: DenseRows | None, key: Hashable, writes: int, changes: array[int], allowed: np.ndarray,
                  vectors: np.ndarray, rows: int) -> tuple[DenseRows | None, np.ndarray]:
    """Return the copy to keep for a dense filter (None: none) and the vectors of the slots it allows, of an index
    of `rows` rows whose vectors are `vectors` (its `writes`-th put, its change log `changes`).

    A filter that allows every row (a session's own searches, as a rule) is answered with the index's vectors
    themselves: in slot order they are that array already, and score the same to the bit
    (tests/test_assemble_cost.py). A copy doubled what a session's vectors held (2 KB a row of 512 floats), and 32
    sessions of 1,000 turns no longer fitted the read cache: each turn loaded its session again (issue 47).
    """
    if len(allowed) == rows:
        return (None if kept is not None and kept.key == key else kept), vectors[:rows]
    kept = gather_dense_rows(kept, key, writes, changes, allowed, vectors)
    return kept, kept.buffer[:len(allowed)]


def gather_dense_rows(kept: DenseRows | None, key: Hashable, writes: int, changes: array[int], allowed: np.ndarray,
               vectors: np.ndarray) -> DenseRows:
    """Return the vectors of the allowed slots, reusing `kept`'s buffer when the filter only gained rows since."""
    dim = vectors.shape[1]
    if kept is not None and kept.key == key and only_added(kept, allowed, changes):
        buffer, count = kept.buffer, len(kept.allowed)
        if len(allowed) > len(buffer):  # out of room: a larger buffer, the rows copied once
            buffer = np.empty((len(allowed) + len(allowed) // 4 + 64, dim), dtype=np.float32)
            buffer[:count] = kept.buffer[:count]
        buffer[count:len(allowed)] = vectors[allowed[count:]]
    else:
        buffer = np.empty((len(allowed) + len(allowed) // 4 + 64, dim), dtype=np.float32)
        buffer[:len(allowed)] = vectors[allowed]
    return DenseRows(key, writes, len(changes), allowed, buffer)


def only_added(kept: DenseRows, allowed: np.ndarray, changes: array[int]) -> bool:
    """Return True when the filter now allows what it allowed when `kept` was made, unchanged, and more rows
    after them only: no allowed row was written since (a vector, a supersede) and none left or came in between."""
    count = len(kept.allowed)
    if len(allowed) < count or not np.array_equal(allowed[:count], kept.allowed):
        return False
    changed = np.frombuffer(changes, dtype=np.int32)[kept.seen:]
    return not count or not np.isin(changed, kept.allowed, assume_unique=False).any()


def unit_vector(vector: Any, dim: int) -> np.ndarray:
    """Return the vector scaled to length 1 (zeros stay zeros; no dimension: an empty vector)."""
    if not dim:
        return np.zeros(0, dtype=np.float32)
    array = np.zeros(dim, dtype=np.float32) if vector is None else np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return array / norm if norm else array


def inner_products(vectors: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Return each row's inner product with the query (float32 rows and query, C-contiguous), each row summed on
    its own, in one order whatever rows are beside it.

    A session's dense search scores every row it holds, so this product is the part of a search that follows the
    history (issue 47): at turn 3,000 of bench.long_session's chat 10k rows of 512 floats, 1.8 of a search's 2.6 ms
    and ~40 % of what an assemble there costs beyond one at turn 200 (py-spy). numpy hands it to OpenBLAS's sgemv,
    which the server runs on one thread (acn/app/process.py): 1.73 ms for 10k x 512 here, where faiss's SIMD kernel
    (faiss ships with Milvus Lite, which loads it itself to build HNSW segments) takes 0.71 ms. Its sums are not
    BLAS's to the last bit (4e-8 at most on unit vectors); unlike BLAS's, which sums rows in blocks, a row's score
    here is the same in the whole matrix or in any subset of it. Without faiss, numpy's product.
    """
    kernel = dense_kernel()
    if kernel is None or not (vectors.flags.c_contiguous and query.flags.c_contiguous) \
            or vectors.dtype != np.float32 or query.dtype != np.float32 or vectors.shape[1:] != query.shape:
        product: np.ndarray = vectors @ query
        return product
    scores = np.empty(len(vectors), dtype=np.float32)
    if len(vectors):
        kernel.fvec_inner_products_ny(kernel.swig_ptr(scores), kernel.swig_ptr(query), kernel.swig_ptr(vectors),
                                      len(query), len(vectors))
    return scores


@cache
def dense_kernel() -> ModuleType | None:
    """Return faiss when it loads (its first import takes ~0.15 s: the runtime makes it while warming the embedder,
    not a first search), else None."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss
