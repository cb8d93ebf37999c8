"""What makes a Milvus Lite file fast, and is off for a Milvus server: the in-process read cache and session indexes,
the filter evaluator they answer with, the one-time loads, read priority, cached tokens and column inserts.

Milvus Lite runs inside this process and answers scalar filters by scanning every row (STORAGE.md); these modules
keep a request's cost on its own namespace. They are the database room's own: other rooms reach them only through
its door (acn.storage.database: ReadCache, HeldIndexes, Kept, READS ...), the pipelines not at all.
"""
