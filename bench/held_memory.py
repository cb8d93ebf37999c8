"""Where the memory held per agent goes (issue 21): RSS against Python's traced objects, malloc and Arrow.

Run: .venv/bin/python -m bench.held_memory --agents 2000 --warm 1000          # in process, ~5 min under load
     ARROW_DEFAULT_MEMORY_POOL=mimalloc .venv/bin/python -m bench.held_memory   # pyarrow's own default pool

In one process (Flask's test client, the app on a Lite file in a temporary folder), agents each write two memories
and search once, as in bench.namespace's agents phase. After `--warm` agents (the write path's one-time loads are
behind) the store is flushed and a tracemalloc snapshot taken; after the rest, another. Printed: RSS, tracemalloc's
traced total, glibc's arenas (mallinfo2: in use, free), Arrow's pool (live bytes, peak), what Lite holds (segments,
rows, Arrow bytes), the RSS after malloc_trim, then the growth between the snapshots by file and by line.
tracemalloc adds its own malloc use (RSS is higher than without it); compare traced totals, not RSS, across runs.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import random
import tempfile
import time
import tracemalloc
from contextlib import suppress
from pathlib import Path
from typing import Any

import acn.storage.process.allocator  # before pyarrow, as server.py does: the pool a server uses
from bench.namespace import items
from bench.perf import InProcess, memory_text, opened_app, say

MB = 2**20


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def status(key: str) -> float:
    """Return a /proc/self/status figure in MB (VmRSS, RssAnon, RssFile)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key}")


def native() -> str:
    import pyarrow

    pool = pyarrow.default_memory_pool()
    text = f"Arrow[{pool.backend_name}] live {pool.bytes_allocated() / MB:.1f} MB, peak {pool.max_memory() / MB:.1f}"
    with suppress(OSError, AttributeError):  # not glibc: no arena figures
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
        text += (f"; malloc arenas {info.arena / MB:.1f} MB (in use {info.uordblks / MB:.1f}, "
                 f"free {info.fordblks / MB:.1f})")
    return text + f"; RssAnon {status('RssAnon'):.0f} RssFile {status('RssFile'):.0f}"


def lite_holdings() -> list[str]:
    """Segments, rows and Arrow bytes each Lite collection of this process holds (Lite's private state: a probe)."""
    from milvus_lite.server_manager import server_manager_instance

    lines = []
    for _server, db, _port in list(server_manager_instance._servers.values()):
        for (_, name), collection in list(db._collections.items()):
            segments: list[Any] = list(collection._segment_cache.values())
            lines.append(f"  {name}: {len(segments)} segments, {sum(len(s.pks) for s in segments):,} rows, "
                         f"{sum(s.table.nbytes for s in segments) / MB:.2f} MB of Arrow tables, "
                         f"{sum(len(s.sparse_indexes) for s in segments)} BM25 indexes built")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=2000)
    parser.add_argument("--warm", type=int, default=1000, help="agents before the first snapshot")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    rng = random.Random(21)
    with tempfile.TemporaryDirectory(prefix="acn-held-") as tmp, opened_app(Path(tmp) / "memory.db") as app:
        client, store = InProcess(app), app.extensions["acn"].store
        client.post("memory_retrieve", {"agent_id": "warm", "session_id": "s", "query": "订单现在到哪了？"})
        tracemalloc.start()
        first = None
        for agent in range(args.agents + 1):
            if agent == args.warm:
                store.flush()
                gc.collect()
                first, rss = tracemalloc.take_snapshot(), status("VmRSS")
                say(f"{agent} agents: traced {tracemalloc.get_traced_memory()[0] / MB:.1f} MB; {native()}")
            if agent == args.agents:
                break
            namespace = {"agent_id": f"agent-{agent}", "session_id": "s"}
            client.post("memory_write", {**namespace, "items": items(rng, 2)})
            client.post("memory_retrieve", {**namespace, "query": memory_text(rng)[1]})
        time.sleep(1.5)
        store.flush()
        gc.collect()
        last = tracemalloc.take_snapshot()
        say(f"{args.agents} agents: traced {tracemalloc.get_traced_memory()[0] / MB:.1f} MB; {native()}; "
            f"RSS {status('VmRSS') - rss:+.1f} MB since agent {args.warm}")
        print("\n".join(lite_holdings()))
        trims = getattr(store, "trims", 0)
        if trims:
            say(f"the flusher trimmed {trims} times, {getattr(store, 'trim_seconds', 0.0) / trims * 1000:.1f} ms each")
        acn.storage.process.allocator.trim_free_memory()
        say(f"after malloc_trim: RSS {status('VmRSS') - rss:+.1f} MB since agent {args.warm}")
        assert first is not None
        by_file = sorted(last.compare_to(first, "filename"), key=lambda s: -s.size_diff)
        print(f"\ntraced growth by file over agents {args.warm}..{args.agents}:")
        for stat in by_file[:args.top]:
            print(f"{stat.size_diff / MB:8.2f} MB {stat.count_diff:+9,} blocks  {stat.traceback[0].filename}")
        print("\nby line:")
        for stat in last.compare_to(first, "lineno")[:args.top]:
            frame = stat.traceback[0]
            print(f"{stat.size_diff / MB:8.2f} MB {stat.count_diff:+9,} blocks  {frame.filename}:{frame.lineno}")


if __name__ == "__main__":
    main()
