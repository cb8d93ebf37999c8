"""What makes a Milvus Lite file fast, and is off for a Milvus server: the in-process read cache and session index,
the filter evaluator they answer with, the one-time loads, read priority, cached tokens and column inserts.

Milvus Lite runs inside this process and answers scalar filters by scanning every row (STORAGE.md); these modules
keep a request's cost on its own namespace. Above storage only the app's wiring names them (acn/app/runtime.py,
and acn/server.py for the Foreground wrapper), and the write path one type (Stamp).
"""
