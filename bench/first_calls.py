"""Each node's first call after /readyz, beside the calls after it, on a copy of a store filled before (issue 47).

Run: .venv/bin/python -m bench.first_calls STORE_DIR [--embedder use] [--nodes memory_retrieve,assemble,...]
STORE_DIR holds a `memory.db` that `python -m bench.scale` filled (its big namespace is read). In process (the app
on a copy of the store, no HTTP): after /readyz answers 200, for each node in turn, its first call in the big
namespace, then --warm more; prints one JSON line: seconds to ready, and per node [first ms, median warm ms, first
CPU ms, median warm CPU ms], CPU being the whole process's (Milvus Lite runs in it), which a loaded machine moves
far less than the wall clock. bench/results/first-calls.md ran it on main and the branch in turn.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from flask.testing import FlaskClient

from acn.common.settings import Settings
from acn.server import create_app
from bench import scale


def call(client: FlaskClient, node: str, rng: random.Random) -> tuple[float, float]:
    """Return (wall ms, process CPU ms) of one call of the node in the big namespace."""
    cpu, started = time.process_time(), time.perf_counter()
    response = client.post(f"/v1/nodes/{node}", json=scale.body(node, scale.BIG, rng))
    if response.status_code != 200:
        raise RuntimeError(f"{node} answered {response.status_code}: {response.get_data()[:300]!r}")
    return (time.perf_counter() - started) * 1000, (time.process_time() - cpu) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("store", type=Path, help="a folder holding memory.db (filled by bench.scale)")
    parser.add_argument("--embedder", default="none")
    parser.add_argument("--nodes", default="memory_retrieve,assemble,record_turn,memory_write")
    parser.add_argument("--warm", type=int, default=5)
    parser.add_argument("--cache", type=Path, help="the model cache (default: model-cache beside the store's)")
    args = parser.parse_args()
    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as folder:
        shutil.copytree(args.store / "memory.db", Path(folder) / "memory.db")
        started = time.perf_counter()
        app = create_app(Settings(milvus_uri=str(Path(folder) / "memory.db"), embedder=args.embedder,
                                  log_level="WARNING", cache_dir=str(args.cache or args.store / "model-cache")))
        try:
            client = app.test_client()
            while client.get("/readyz").status_code != 200:
                time.sleep(0.05)
            report: dict[str, object] = {"ready_s": round(time.perf_counter() - started, 1)}
            for node in args.nodes.split(","):
                first = call(client, node, rng)
                warm = [call(client, node, rng) for _ in range(args.warm)]
                report[node] = [round(first[0], 1), round(statistics.median(w[0] for w in warm), 1),
                                round(first[1], 1), round(statistics.median(w[1] for w in warm), 1)]
            print(json.dumps(report))
        finally:
            app.extensions["acn"].close()


if __name__ == "__main__":
    main()
