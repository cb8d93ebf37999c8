"""The database room: the store interface, Milvus behind it, encryption at rest, and the Lite engine's speed code.

Its door is this module: the other rooms and the app's wiring import the names below and nothing under it.
- the store interface (`MemoryStore` and its records, filters, hits and collection specs) and its Milvus
  implementation (`MilvusStore`, `open_store`), with the flush policy and the write lock inside;
- encryption at rest (`SnapshotCipher`, `RowSealer`, `SealedStore`, `RefusedStore`) and the store's own facts;
- how a memory is a row (`memory_spec`, `to_record`/`from_record`, stored ids, the filters a read is made of);
- what only a Milvus Lite file needs, in `lite/`: the read cache with its session indexes (`ReadCache`, `Kept`),
  read priority (`READS`) and the shared segmentation of tokens.
"""

from acn.storage.database.base import CollectionSpec, Filter, Hit, MemoryStore, Record
from acn.storage.database.crypto import SnapshotCipher
from acn.storage.database.kept import SHARED_KEPT, Kept
from acn.storage.database.lite.dense_rows import dense_kernel
from acn.storage.database.lite.held import HeldIndexes, held_page, held_rows, held_search, merged_hits
from acn.storage.database.lite.index_loads import GroupKey
from acn.storage.database.lite.index_rows import DISTINCT_FETCH
from acn.storage.database.lite.read_cache import ReadCache
from acn.storage.database.lite.read_priority import READS
from acn.storage.database.lite.sizes import CACHED_BYTES, CACHED_INDEX_ROWS, CACHED_INDEXES, CACHED_POOLS
from acn.storage.database.lite.tokens import share_segmentation
from acn.storage.database.lite.write_counters import Stamp
from acn.storage.database.memory_rows import (
    EMBEDDED,
    EMBEDDED_FIELD,
    NO_TURN,
    OUTPUT_FIELDS,
    QUERY_WINDOW,
    SCOPED_ID_CHARS,
    Scored,
    client_id,
    every_row,
    from_record,
    group_filter,
    group_turns_user,
    group_user,
    kinds_filter,
    live_filter,
    memory_spec,
    namespace_filter,
    new_memory_id,
    one_per_text,
    pending_vector,
    scope_filter,
    session_filter,
    stored_id,
    stored_ids,
    tenant_filter,
    to_record,
    user_filter,
    user_group,
    user_turns_group,
    with_client_id,
)
from acn.storage.database.milvus import MilvusStore
from acn.storage.database.milvus_setup import lite_stored_rows, open_store, warm_insert_checks
from acn.storage.database.sealed import RefusedStore, RowSealer, SealedStore, sealing_problem
from acn.storage.database.store_facts import check_encryption, read_fact, store_secret, write_fact

__all__ = [
    "CACHED_BYTES", "CACHED_INDEXES", "CACHED_INDEX_ROWS", "CACHED_POOLS", "CollectionSpec", "DISTINCT_FETCH",
    "EMBEDDED", "EMBEDDED_FIELD", "Filter", "GroupKey", "HeldIndexes", "Hit", "Kept", "MemoryStore", "MilvusStore",
    "NO_TURN", "OUTPUT_FIELDS", "QUERY_WINDOW", "READS", "ReadCache", "Record", "RefusedStore", "RowSealer",
    "SCOPED_ID_CHARS", "SHARED_KEPT", "Scored", "SealedStore", "SnapshotCipher", "Stamp", "check_encryption",
    "client_id", "dense_kernel", "every_row", "from_record", "group_filter", "group_turns_user", "group_user",
    "held_page", "held_rows", "held_search", "kinds_filter", "lite_stored_rows", "live_filter", "memory_spec",
    "merged_hits", "namespace_filter",
    "new_memory_id", "one_per_text", "open_store", "pending_vector", "read_fact", "scope_filter", "sealing_problem",
    "session_filter", "share_segmentation", "store_secret", "stored_id", "stored_ids", "tenant_filter", "to_record",
    "user_filter", "user_group", "user_turns_group", "warm_insert_checks", "with_client_id", "write_fact",
]
