"""Dense embedders behind one small interface, registered by name."""

from __future__ import annotations

import hashlib
import math
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import ClassVar

from common.errors import ValidationError


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


EMBEDDERS: dict[str, Callable[[], Embedder]] = {"hash": HashEmbedder}


def register_embedder(name: str, factory: Callable[[], Embedder]) -> None:
    """Register an embedder factory under a name usable in ACN_EMBEDDER."""
    EMBEDDERS[name] = factory


def load_embedder(name: str) -> Embedder | None:
    """Return the embedder named by the setting, or None for 'none' (BM25 only)."""
    if name in ("", "none"):
        return None
    if name not in EMBEDDERS:
        raise ValidationError(f"unknown embedder {name!r}; known: none, {', '.join(sorted(EMBEDDERS))}")
    return EMBEDDERS[name]()
