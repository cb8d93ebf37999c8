"""Does a Milvus Lite read cost grow with every row ever deleted from its collection? (issue 47, found 2026-12-07)

Lite 3 keeps a tombstone for every primary key deleted from a collection until no data file could hold an older
copy of it: until the smallest sequence number among the collection's data files passes it. A row written once and
never again (a finished session's state) stays in the oldest file, so from then on nothing is collected, and every
`get`, `query` and `search` copies the whole tombstone map first (`DeltaIndex.frozen_copy`, per read, under a lock).
The sessions collection deletes a primary key a version (the prune of old versions), so its map grows by about one
entry a turn of every session the store has served.

This reproduces it without our code: a collection shaped like the sessions collection, one row that stays, then
batches of rows written, flushed and deleted by primary key a batch later (as prunes do); after each step, the p50
of a primary-key `get`.
    .venv/bin/python -m bench.lite_tombstones [--deleted 200000] [--step 50000] [--shared]
With --shared, Lite's readers share the tombstones as a Lite file opened by this project makes them do
(acn/storage/database/lite/tombstones.py): run it with and without. Not part of the test run.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from pymilvus import DataType, MilvusClient

from acn.storage.database.lite.tombstones import share_tombstone_snapshots
from bench.long_session import report

COLLECTION = "sessions_like"
BATCH = 2000


def open_collection(folder: str) -> MilvusClient:
    """A Lite file with a collection shaped like the sessions collection (a key, a payload, Milvus's tiny vector)."""
    client = MilvusClient(str(Path(folder) / "tombstones.db"))
    schema = client.create_schema(auto_id=False, enable_dynamic_field=False)
    schema.add_field("id", DataType.VARCHAR, is_primary=True, max_length=128)
    schema.add_field("state", DataType.VARCHAR, max_length=4096)
    schema.add_field("dense", DataType.FLOAT_VECTOR, dim=2)
    index = client.prepare_index_params()
    index.add_index(field_name="dense", index_type="FLAT", metric_type="COSINE")
    client.create_collection(COLLECTION, schema=schema, index_params=index)
    client.load_collection(COLLECTION)
    return client


def get_p50(client: MilvusClient, calls: int = 50) -> float:
    """Return the p50 ms of a primary-key get of the row that stays."""
    times = []
    for _ in range(calls):
        started = time.perf_counter()
        client.get(COLLECTION, ids=["finished-session:head"])
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run(deleted: int, step: int, shared: bool = False) -> str:
    if shared:
        share_tombstone_snapshots()
    how = "readers share the tombstones (copy on write)" if shared else "each read copies the tombstones (Lite's own)"
    lines = ["### A primary-key `get` in Milvus Lite against the primary keys ever deleted from its collection: "
             f"{how} ({time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC)", "",
             "| primary keys deleted | get p50 ms |", "|---|---|"]
    with tempfile.TemporaryDirectory() as folder:
        client = open_collection(folder)
        client.insert(COLLECTION, [{"id": "finished-session:head", "state": "{}", "dense": [1.0, 0.0]}])
        client.flush(COLLECTION)
        done = 0
        lines.append(f"| 0 | {get_p50(client):.2f} |")
        previous: list[str] = []
        while done < deleted:
            for start in range(done, min(deleted, done + step), BATCH):
                ids = [f"session-{n % 400}:v{n}" for n in range(start, min(deleted, start + BATCH))]
                client.insert(COLLECTION, [{"id": key, "state": "{}", "dense": [1.0, 0.0]} for key in ids])
                client.flush(COLLECTION)  # the versions reach a data file, then the next batch prunes them
                if previous:
                    client.delete(COLLECTION, ids=previous)
                previous = ids
            done = min(deleted, done + step)
            client.flush(COLLECTION)
            lines.append(f"| {done:,} | {get_p50(client):.2f} |")
            print(lines[-1], flush=True)
        client.close()
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deleted", type=int, default=200_000)
    parser.add_argument("--step", type=int, default=50_000)
    parser.add_argument("--shared", action="store_true", help="readers share the tombstones (this project's Lite)")
    parser.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = parser.parse_args()
    if args.deleted < 0 or args.step < 1:
        parser.error("--deleted must be at least 0, --step at least 1")
    report(run(args.deleted, args.step, args.shared), args.out)


if __name__ == "__main__":
    main()
