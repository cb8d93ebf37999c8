"""The process room: what runs beside the requests and belongs to the process, owned by the app's runtime.

Its door is this module (the app layer opens it through acn/app/process.py):
- the allocators under the embedded Lite (`prefer_system_arrow_pool`, `limit_malloc_arenas`, `trim_free_memory`);
  importing this door chooses Arrow's pool, so it is imported before anything that imports pymilvus;
- `Foreground`, the WSGI wrapper that makes request handling foreground work for read priority;
- `EmbeddingBacklog`, the worker that embeds rows written with a pending vector.
"""

# ruff: noqa: I001  (the allocator first: importing it picks Arrow's pool before pymilvus, below, loads pyarrow)
from acn.storage.process.allocator import limit_malloc_arenas, prefer_system_arrow_pool, trim_free_memory
from acn.storage.process.embedding_backlog import EmbeddingBacklog
from acn.storage.process.foreground import Foreground

__all__ = [
    "EmbeddingBacklog", "Foreground", "limit_malloc_arenas", "prefer_system_arrow_pool", "trim_free_memory",
]
