"""Rows moved at start-up, before the server serves: memories of another embedder's collection carried over, and
rows stored before ids were scoped by tenant given their scoped keys (scope_legacy_ids).

Memories written under another embedder, carried into the collection this start opened:

The dimension of the embedder is part of the memories collection's name (memory_rows.memory_spec): a store written
with `ACN_EMBEDDER=none` holds `<prefix>_memories`, one written with `use` `<prefix>_memories_d512`. Before this,
changing the embedder (or upgrading past the change of its default from `none` to `use`) opened an empty
collection, and every memory of the store silently went out of reach. Now, when a start creates its memories
collection and the store holds another memories collection of the same prefix (and the same encryption), its rows
are copied in, as stored, before the server serves:

- with the embedding backlog (ACN_EMBEDDING_BACKLOG auto or on: the default), each row is written with its text and
  EMBEDDED 0; BM25 finds it at once and the background worker fills its vector, as for a bulk import. Without the
  backlog (`off`, or a Milvus server without partial updates) the rows are embedded during the copy;
- the source collection is left as it was: setting the old embedder again serves it as it was at the switch;
- when several are there, the one with the most rows is the source (the others are named in the log);
- crash-safe: a store fact says the copy has begun (and from where) and another that it is done; a start that
  finds it begun and not done copies again (upserts of the same rows). Every later start reads the fact only.
"""

from __future__ import annotations

import logging
import re

from acn.storage.database import (
    EMBEDDED_FIELD,
    OUTPUT_FIELDS,
    Filter,
    MemoryStore,
    Record,
    SealedStore,
    every_row,
    memory_spec,
    pending_vector,
    read_fact,
    stored_id,
    write_fact,
)
from acn.storage.repositories.memories import MemoryRepository

log = logging.getLogger("acn.store")
BATCH = 500  # rows copied (and, without the backlog, embedded) at a time
DONE = "done"
FROM = "from "


def fact_name(collection: str) -> str:
    """Return the store fact that records the carry-over into a collection."""
    return f"carried:{collection}"


def carry_over(memories: MemoryRepository, facts_collection: str) -> int:
    """Copy the rows of the store's other memories collection into the one `memories` opened (see the module);
    return how many rows were copied (0: nothing to carry, or carried at an earlier start)."""
    raw = memories.raw_store
    target = memories.spec.name
    fact = read_fact(raw, facts_collection, fact_name(target))
    if fact == DONE:
        return 0
    if fact is None and not memories.created:  # a collection from before this step: its rows are its own
        write_fact(raw, facts_collection, fact_name(target), DONE)
        return 0
    source = fact[len(FROM):] if fact and fact.startswith(FROM) else pick_source(memories)
    if source is None or not raw.exists(source) or not loaded(memories, source):
        write_fact(raw, facts_collection, fact_name(target), DONE)
        return 0
    write_fact(raw, facts_collection, fact_name(target), FROM + source)
    copied = copy_rows(memories, source)
    write_fact(raw, facts_collection, fact_name(target), DONE)
    log.warning("memories carried over from %s into %s (the embedder changed): %d rows; %s", source, target,
                copied, "their vectors are filled by the embedding backlog" if memories.embed_later else
                "embedded during the copy" if memories.embedder is not None else "BM25 only")
    return copied


def pick_source(memories: MemoryRepository) -> str | None:
    """Return the other memories collection of this prefix and encryption with the most rows (None: there is none)."""
    raw = memories.raw_store
    sealed = memories.sealer is not None
    base = re.escape(memory_spec(memories.prefix, 0).name)
    pattern = re.compile(base + r"(?:_d(\d+))?" + ("_sealed" if sealed else ""))
    specs = {match[0]: memory_spec(memories.prefix, int(match[1] or 0), sealed=sealed)
             for match in map(pattern.fullmatch, raw.collection_names()) if match and match[0] != memories.spec.name}
    names = [name for name, spec in specs.items() if spec.name == name]
    if not names:
        return None
    for name in names:  # an existing collection is only loaded (a collection not opened since a restart is released)
        raw.ensure(specs[name])
    sizes = {name: len(every_row(raw, name, Filter(""), ["id"])) for name in sorted(names)}
    source = max(sizes, key=lambda name: sizes[name])
    if not sizes[source]:
        return None
    if len(names) > 1:
        log.warning("memories collections %s: carrying over %s (%d rows); the others are left as they are",
                    sizes, source, sizes[source])
    return source


def loaded(memories: MemoryRepository, source: str) -> bool:
    """Load a memories collection this start did not open (True), or say it is not one (False)."""
    match = re.fullmatch(re.escape(memory_spec(memories.prefix, 0).name) + r"(?:_d(\d+))?(?:_sealed)?", source)
    if match is None:
        return False
    memories.raw_store.ensure(memory_spec(memories.prefix, int(match[1] or 0), sealed=memories.sealer is not None))
    return True


def copy_rows(memories: MemoryRepository, source: str) -> int:
    """Copy every row of `source` into the repository's collection, vectors pending (or embedded now)."""
    raw = memories.raw_store
    # Read and written as plain rows: the source's sealed rows are opened, the target's sealed again (same key).
    reader: MemoryStore = SealedStore(raw, memories.sealer, {source}) if memories.sealer else raw
    ids = [str(row["id"]) for row in every_row(raw, source, Filter(""), ["id"])]
    for start in range(0, len(ids), BATCH):
        part = ids[start:start + BATCH]
        rows = reader.query(source, Filter("id in {carried}", {"carried": part}), fields=OUTPUT_FIELDS,
                            limit=len(part))
        records = [as_target_row(memories, row) for row in rows]
        if memories.embedder is not None and memories.flagged and not memories.embed_later:
            vectors = memories.embedder.embed_batch([str(row["content"]) for row in rows])
            for record, vector in zip(records, vectors, strict=True):
                record.update({"dense": list(vector), EMBEDDED_FIELD: 1})
        with memories.write_order:
            memories.store.upsert(memories.spec.name, records)
    memories.kept.forget_all()  # rows were written behind the read cache's back
    # The heads collection is shared by every memories collection of the prefix, but the source's heads may not
    # be complete (a store from before heads, still being built): written again for the rows now here.
    if ids:
        memories.heads.build(lambda fields: every_row(memories.store, memories.spec.name, Filter(""), fields))
    return len(ids)


def as_target_row(memories: MemoryRepository, row: Record) -> Record:
    """Return the row as the target collection holds it: its own fields, and a pending vector when it has one."""
    record = {field: row[field] for field in OUTPUT_FIELDS if field in row}
    if memories.flagged:
        record[EMBEDDED_FIELD] = 0
        record["dense"] = pending_vector(memories.spec.dense_dim)
    return record


def scope_legacy_ids(memories: MemoryRepository, batch: int = BATCH) -> int:
    """Give rows stored before ids were scoped by tenant their scoped primary key; return how many moved.

    Rows are copied as stored (sealed ones stay sealed, vectors and flags kept), then the old ones deleted: a
    start that dies in between leaves both copies, and the next start deletes the old one (the copy is an
    upsert of the same key). Reads no other tenant's rows into any answer: it runs before the server serves.
    """
    raw, name = memories.raw_store, memories.spec.name
    keys = [str(row["id"]) for row in every_row(raw, name, Filter(""), ["id", "tenant"])
            if stored_id(str(row["tenant"]), str(row["id"])) != str(row["id"])]
    if not keys:
        return 0
    fields = sorted((raw.field_names(name) or set(OUTPUT_FIELDS)) - {"sparse"})
    for start in range(0, len(keys), batch):
        part = keys[start:start + batch]
        rows = raw.query(name, Filter("id in {legacy}", {"legacy": part}), fields=fields, limit=len(part))
        raw.upsert(name, [{**row, "id": stored_id(str(row["tenant"]), str(row["id"]))} for row in rows])
        raw.delete(name, Filter("id in {legacy}", {"legacy": part}))
    memories.kept.forget_all()
    log.info("ids scoped by tenant: %d rows moved to their scoped keys", len(keys))
    return len(keys)
