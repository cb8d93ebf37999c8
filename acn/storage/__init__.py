"""Storage, in three rooms with a door each (docs/ARCHITECTURE.md, "Storage's rooms"):

- `acn.storage.database`: the store interface and Milvus behind it, encryption, and the Lite engine's speed code;
- `acn.storage.repositories`: memories, sessions and memory heads over that interface (what the pipelines use);
- `acn.storage.process`: the allocators, request priority and the embedding backlog, which the app's runtime owns.

A room imports another room only through its door (the package's `__init__`), and only downwards: process, then
repositories, then database; nothing outside storage imports anything but a door (tests/test_storage_rooms.py).
"""
