"""The process a server runs in, prepared around the app: the door to storage's process room for the front door.

Importing this module chooses Arrow's memory pool (acn/storage/process/allocator.py): Arrow reads its setting once,
when pyarrow is imported, and pymilvus imports pyarrow as it is imported itself, so acn/server.py imports this module
before anything of ours that imports pymilvus.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, MutableMapping

from acn.common.settings import Settings
from acn.storage.process import Foreground, limit_malloc_arenas

log = logging.getLogger("acn.process")
# The variables by which an operator chooses BLAS's threads: one of them set, the server leaves the count alone.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "BLIS_NUM_THREADS")


def prepare_process(settings: Settings) -> None:
    """Cap malloc's arenas and BLAS's threads; call before Runtime.open starts Lite's threads and the server its
    request threads (arenas are made per thread)."""
    limit_malloc_arenas(settings.malloc_arenas)
    limit_blas_threads(os.environ)


def limit_blas_threads(environ: MutableMapping[str, str]) -> int | None:
    """Run numpy's BLAS, and the OpenMP runtimes loaded later, on one thread unless the operator chose a count;
    return the count set (None: left alone).

    Why: the dense leg of a search is one matrix-vector product over the namespace's vectors, large enough for
    OpenBLAS to hand half of it to a second thread, which then spins waiting for more work. On the 2-core machines
    here that thread burnt 18 of the 51 s of CPU a `use` server spent on 600 turns of one chat (35 s with one
    thread, assemble p50 within 1 ms), CPU the request threads and Lite's writer need. A server's parallelism is
    its request threads; the USE embedder already ran its products on one thread (acn/providers/embedders.py).

    Libraries loaded after start-up read OMP_NUM_THREADS when they load, so it is set here: Milvus Lite builds an
    HNSW index of each new segment (after each flush and compaction of a Lite file) with faiss, which brings its own
    OpenMP runtime and OpenMP-threaded OpenBLAS, a thread a core. In one `use` chat to turn 2,400 those threads
    took up to 2.9 ms of CPU a turn beside Lite's own 4.6 (blocks of 200 turns), on the cores the requests run on.
    """
    if any(environ.get(name, "").strip() for name in BLAS_THREAD_VARIABLES):
        return None
    environ["OMP_NUM_THREADS"] = "1"  # read by an OpenMP runtime as it loads (faiss's, lazily, from Lite)
    try:
        import numpy  # noqa: F401  (threadpoolctl limits the libraries loaded: numpy's BLAS must be one of them)
        from threadpoolctl import threadpool_limits
    except ImportError:  # an install without them has no BLAS product to limit
        return None
    threadpool_limits(limits=1, user_api="blas")
    log.debug("BLAS limited to one thread")
    return 1


def requests_first(app: Callable[..., Iterable[bytes]]) -> Foreground:
    """Return the app with its handling of each request marked foreground work: background reads of the embedded
    Lite (a session index loading) wait for it (acn/storage/database/lite/read_priority.py)."""
    return Foreground(app)
