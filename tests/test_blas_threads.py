"""numpy's BLAS runs on one thread in a server process unless the operator chose a count (issue 47: a second
OpenBLAS thread spun after each dense product, a third of a `use` server's CPU), and so do the OpenMP runtimes
loaded later (faiss's, with which Milvus Lite builds an HNSW index of each new segment).

Each case runs in its own interpreter: the limit is process state, and OpenBLAS reads its variables once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from acn.app.process import BLAS_THREAD_VARIABLES
from tests.conftest import ROOT, server_env

PROBE = """
    import json
    import numpy
    from threadpoolctl import threadpool_info
    from acn.app.process import prepare_process
    from acn.common.settings import Settings

    def blas_threads():
        return sorted({info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"})

    before = blas_threads()
    prepare_process(Settings())
    print(json.dumps([before, blas_threads()]))
"""

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="BLAS starts with one thread on one core")


def _before_and_after(**env: str) -> list[list[int]]:
    """Return the BLAS thread counts of a fresh interpreter before and after prepare_process."""
    environment = server_env(**env)
    for name in BLAS_THREAD_VARIABLES:
        if name not in env:
            environment.pop(name, None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(PROBE)], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=120, check=True)
    counts: list[list[int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return counts


def test_a_server_process_runs_blas_on_one_thread() -> None:
    before, after = _before_and_after()
    assert after == [1]
    assert before != [1]  # OpenBLAS's own choice is a thread a core: without the limit the test fails


LATER = """
    import json
    import numpy
    from acn.app.process import prepare_process
    from acn.common.settings import Settings

    prepare_process(Settings())
    import faiss  # as Milvus Lite imports it, after start-up, to build a segment's index
    from threadpoolctl import threadpool_info

    print(json.dumps([faiss.omp_get_max_threads(), sorted({info["num_threads"] for info in threadpool_info()
                                                           if info["filepath"].find("faiss") >= 0})]))
"""


def test_an_openmp_runtime_loaded_after_start_up_runs_on_one_thread() -> None:
    pytest.importorskip("faiss")
    environment = server_env()
    for name in BLAS_THREAD_VARIABLES:
        environment.pop(name, None)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(LATER)], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=120, check=True)
    # faiss's OpenMP threads, and its own OpenMP-threaded OpenBLAS: one each (a thread a core without the limit).
    assert json.loads(done.stdout.strip().splitlines()[-1]) == [1, [1]]


def test_the_operators_own_count_is_left_alone() -> None:
    assert _before_and_after(OPENBLAS_NUM_THREADS="2") == [[2], [2]]
    assert _before_and_after(OMP_NUM_THREADS="2") == [[2], [2]]
