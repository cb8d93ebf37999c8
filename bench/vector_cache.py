"""A disk cache of passage vectors for bench.recall (bench only: the product never reads it).

e5 embeds ~11 message passages a second on these 2 cores, so every run of `bench.recall --ours-embedder e5` over
LoCoMo dev re-embedded the same ~2,500 turns for minutes. The cache keeps each model's passage vectors in one
SQLite file keyed by (model, text); queries are not cached, so assemble's latency still includes embedding the
question. A cached vector is the model's own output (stored as float64 bytes, exact), so a run with the cache
ranks exactly as a run without it.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
from array import array
from pathlib import Path

from acn.providers.embedders import CombinedEmbedder, E5Embedder, Embedder, UniversalSentenceEncoder, register_embedder

PREFIX = "bench-cached:"


class VectorCache:
    """(model, text) → vector, in one SQLite file shared by the bench's worker processes."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(path), timeout=300, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS vectors (model TEXT, digest BLOB, vector BLOB, "
                         "PRIMARY KEY (model, digest))")
        self._lock = threading.Lock()

    def get(self, model: str, texts: list[str]) -> dict[str, list[float]]:
        """Return the cached vectors of those texts that have one."""
        found: dict[str, list[float]] = {}
        with self._lock:
            for text in dict.fromkeys(texts):
                row = self._db.execute("SELECT vector FROM vectors WHERE model = ? AND digest = ?",
                                       (model, _digest(text))).fetchone()
                if row is not None:
                    found[text] = array("d", row[0]).tolist()
        return found

    def put(self, model: str, vectors: dict[str, list[float]]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?, ?)",
                                 [(model, _digest(t), array("d", v).tobytes()) for t, v in vectors.items()])
            self._db.commit()


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode("utf-8")).digest()


class CachedEmbedder(Embedder):
    """An embedder whose passage vectors come from the cache when there, else from the model (then cached)."""

    def __init__(self, inner: Embedder, cache: VectorCache) -> None:
        self.inner, self.cache = inner, cache
        self.dim = inner.dim
        self.inline = inner.inline  # type: ignore[misc]  # background as the model would
        self._key = f"{inner.name}/{inner.dim}"

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        found = self.cache.get(self._key, texts)
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        if missing:
            fresh = dict(zip(missing, self.inner.embed_batch(missing), strict=True))
            self.cache.put(self._key, fresh)
            found.update(fresh)
        return [found[text] for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    def warm(self) -> None:
        self.inner.warm()

    def use_cache(self, folder: Path) -> None:
        self.inner.use_cache(folder)


_CACHES: dict[Path, VectorCache] = {}


def cached_name(name: str, path: Path | None) -> str:
    """Register the cached form of a built-in embedder in this process and return the name to ask for (the name
    itself when there is no cache or the embedder is not one of use, e5, use+e5)."""
    if path is None or name not in ("use", "e5", "use+e5"):
        return name
    if path not in _CACHES:
        _CACHES[path] = VectorCache(path)
    cache = _CACHES[path]
    factories = {"use": lambda: CachedEmbedder(UniversalSentenceEncoder(), cache),
                 "e5": lambda: CachedEmbedder(E5Embedder(), cache),
                 "use+e5": lambda: CombinedEmbedder([CachedEmbedder(UniversalSentenceEncoder(), cache),
                                                     CachedEmbedder(E5Embedder(), cache)])}
    register_embedder(PREFIX + name, factories[name])
    return PREFIX + name
