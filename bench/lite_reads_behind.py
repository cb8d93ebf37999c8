"""Does a Milvus Lite server answer a Strong primary-key read with an older row than an acknowledged upsert wrote?

The storage fact behind acn/storage/repositories/catch_up.py. Replicas take turns on a row as lease holders do: 4
rows ("sessions"), 2 writer processes each, every writer holding its row's lock while it reads the row, upserts the
next version (with 6 part rows, deleting the parts 3 versions back) and publishes the version it wrote; every 5th
write flushes. A read that answers anything but the published version (an older row, or none) is counted.

    python -m bench.lite_reads_behind --writes 200

Measured here (2026-12-06, 2 cores, two runs of 200 writes a writer): 7 of 1,600 reads answered an older version
(1 behind each), and 8 of the 1,200 an earlier draft reported (up to 4 behind); never two rows. In the 3-replica storm
of tests/test_multiprocess.py a read also answered no row at all (version 0 for a session at 22).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import tempfile
import time
from multiprocessing.sharedctypes import Synchronized
from pathlib import Path
from typing import Any

from pymilvus import DataType, MilvusClient

from tests.conftest import free_port, start_lite_server, stop_process, wait_for_port

SESSIONS = 4
WRITERS = 2
PARTS = 6


def writer(uri: str, sid: int, writes: int, lock: Any, published: Synchronized, out: Any, flush_every: int) -> None:
    client = MilvusClient(uri)
    behind, late = 0, []
    for done in range(1, writes + 1):
        with lock:
            rows = client.query("t", filter=f'id in ["head{sid}"]', output_fields=["version"],
                                consistency_level="Strong", limit=10)
            seen = sorted(int(row["version"]) for row in rows)
            if seen[-1:] != ([published.value] if published.value else []):
                behind += 1
                late.append((published.value, seen))
            version = published.value + 1
            parts = [{"id": f"s{sid}-{version}-{k}", "version": version, "chunk": "y" * 2000, "vec": [0.3, 0.1]}
                     for k in range(PARTS)]
            if version > 3:
                client.delete("t", filter=f'id like "s{sid}-{version - 3}-%"')
            client.upsert("t", [{"id": f"head{sid}", "version": version, "chunk": "h", "vec": [0.1, 0.2]}, *parts])
            published.value = version
            if done % flush_every == 0:
                client.flush("t")
    out.put((sid, behind, late[:5]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--writes", type=int, default=200, help="writes per writer")
    parser.add_argument("--flush-every", type=int, default=5)
    args = parser.parse_args()
    folder, port = Path(tempfile.mkdtemp()), free_port()
    server = start_lite_server(folder, port)
    try:
        wait_for_port(port, process=server)
        time.sleep(3)
        uri = f"http://127.0.0.1:{port}"
        client = MilvusClient(uri)
        schema = client.create_schema(auto_id=False)
        schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=64)
        schema.add_field("version", DataType.INT64)
        schema.add_field("chunk", DataType.VARCHAR, max_length=65535)
        schema.add_field("vec", DataType.FLOAT_VECTOR, dim=2)
        client.create_collection("t", schema=schema)
        index = client.prepare_index_params()
        index.add_index("vec", index_type="FLAT", metric_type="L2")
        client.create_index("t", index)
        client.load_collection("t")
        out: Any = mp.Queue()
        workers = []
        for sid in range(SESSIONS):
            lock, published = mp.Lock(), mp.Value("i", 0)
            workers += [mp.Process(target=writer, args=(uri, sid, args.writes, lock, published, out, args.flush_every))
                        for _ in range(WRITERS)]
        for process in workers:
            process.start()
        reports = [out.get() for _ in workers]
        for process in workers:
            process.join()
        reads = len(workers) * args.writes
        print(f"{sum(r[1] for r in reports)} of {reads} reads answered an older version (or none)")
        for sid, behind, late in reports:
            print(f"  row {sid}: {behind} behind; (published, seen): {late}")
    finally:
        stop_process(server)


if __name__ == "__main__":
    main()
