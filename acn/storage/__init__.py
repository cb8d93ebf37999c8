"""Storage: the MemoryStore interface, its Milvus implementation and the repositories over it."""
