"""The process's allocators under the embedded Milvus Lite: Arrow's pool, glibc's arenas and its free memory.

Milvus Lite 3 runs in this process and moves every row through pyarrow (WAL batches, memtable, Parquet segments,
compaction). The rows it keeps are small (2,000 memories: 0.7 MB of Arrow tables, 3.5 MB at Arrow's peak), but the
allocator behind them was not: pyarrow's default pool on Linux wheels is a bundled mimalloc, which kept what Lite
freed (server RSS after 3,000 agents of two memories each: +168 MB with mimalloc, +79 MB with Arrow's "system" pool,
i.e. malloc; bench.namespace's agents phase, issue 21).

Importing this module chooses the pool, on purpose and only that: Arrow reads ARROW_DEFAULT_MEMORY_POOL once, when
pyarrow is imported, and pymilvus imports pyarrow (through pandas) as it is imported itself. So server.py imports
this module before anything that imports pymilvus. An operator's own ARROW_DEFAULT_MEMORY_POOL is left as it is.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from functools import cache

log = logging.getLogger("acn.allocator")

ARROW_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"
ARROW_POOL = "system"
# mallopt's parameter number for the arena count (glibc malloc.h: M_ARENA_MAX).
M_ARENA_MAX = -8


def prefer_system_arrow_pool() -> bool:
    """Have Arrow allocate with malloc unless the operator chose a pool; False when it is too late (pyarrow loaded)."""
    if "pyarrow" in sys.modules:
        return False
    os.environ.setdefault(ARROW_POOL_VARIABLE, ARROW_POOL)
    return True


@cache
def _glibc() -> ctypes.CDLL | None:
    """Return the C library when it is glibc (malloc_trim and mallopt's arena count are glibc's), else None."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
    except (OSError, AttributeError):  # musl, macOS, Windows: no such functions; nothing to do there
        return None
    libc.malloc_trim.argtypes = [ctypes.c_size_t]
    libc.malloc_trim.restype = ctypes.c_int
    libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    libc.mallopt.restype = ctypes.c_int
    return libc


def trim_free_memory() -> bool:
    """Hand the free pages of every malloc arena back to the system; True when glibc released some."""
    libc = _glibc()
    return bool(libc and libc.malloc_trim(0))


def limit_malloc_arenas(count: int) -> bool:
    """Cap glibc's malloc arenas (0: leave glibc's default, 8 per core). Call before the threads that allocate start.

    Each thread that meets a locked arena gets one of its own (up to 8 per core), and a freed block can only be
    reused in its own arena: the request threads, Lite's gRPC workers and the flusher each kept their own free space.
    """
    libc = _glibc()
    if count <= 0 or libc is None:
        return False
    return bool(libc.mallopt(M_ARENA_MAX, count))


prefer_system_arrow_pool()
