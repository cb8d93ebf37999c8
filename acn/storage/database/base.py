"""The small store interface every backend implements; repositories derive everything else."""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

Record = dict[str, Any]

_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
# Quotes, backslashes and control characters are what could end a string literal early.
_UNSAFE_STRING = re.compile(r"[\"'\\`\x00-\x1f\x7f]")


@dataclass(frozen=True)
class Filter:
    """A Milvus boolean expression template with its parameters ({name} placeholders).

    Values never get spliced into the template by callers: the store either passes them as
    `filter_params` (servers that support templating) or renders them itself, refusing any string
    outside a safe alphabet, so an identifier can never change the expression's meaning.
    """

    template: str
    params: dict[str, Any] = field(default_factory=dict)

    def and_(self, other: Filter) -> Filter:
        """Return the conjunction of two filters (parameter names must not clash)."""
        if not other.template:
            return self
        if not self.template:
            return other
        clash = set(self.params) & set(other.params)
        if clash:
            raise ValueError(f"filter parameters clash: {sorted(clash)}")
        return Filter(f"({self.template}) and ({other.template})", {**self.params, **other.params})

    def cache_key(self) -> tuple[str, tuple[tuple[str, Any], ...]]:
        """Return a hashable identity of the filter (template and parameter values)."""
        return self.template, tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in self.params.items()))

    def render(self) -> str:
        """Return the expression with every parameter rendered as a checked literal."""
        return _PLACEHOLDER.sub(lambda m: _literal(self.params[m.group(1)]), self.template)


def _literal(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        if _UNSAFE_STRING.search(value):
            raise ValueError("filter value contains a quote, backslash or control character")
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_literal(item) for item in value) + "]"
    raise TypeError(f"unsupported filter value type: {type(value).__name__}")


@dataclass(frozen=True)
class Hit:
    """One search result. `score` is higher-is-better and only comparable within one result list."""

    id: str
    score: float
    record: Record


@dataclass(frozen=True)
class CollectionSpec:
    """What a repository needs from a collection: text search, and optionally a dense vector."""

    name: str
    scalar_fields: dict[str, str]  # field name -> "varchar" | "int64" | "float" | "json"
    text_field: str | None = None
    dense_dim: int = 0
    partition_key: str | None = None
    # How the store tokenizes text_field: "jieba" (the product's analyzer) or "hashed" (text that is already
    # tokens, space-separated: keyed hashes of the jieba tokens in an encrypted collection,
    # acn/storage/database/sealed.py).
    analyzer: str = "jieba"


class MemoryStore(ABC):
    """A collection store with BM25 text search (and dense search when a dimension is configured)."""

    kind: ClassVar[str] = "abstract"
    supports_dense: ClassVar[bool] = False

    @abstractmethod
    def ensure(self, spec: CollectionSpec) -> None:
        """Create the collection if missing and load it."""

    @abstractmethod
    def exists(self, collection: str) -> bool:
        """Return True when the collection exists (it is neither created nor loaded)."""

    @abstractmethod
    def upsert(self, collection: str, records: list[Record]) -> None:
        """Insert or replace records by primary key `id`."""

    def insert(self, collection: str, records: list[Record]) -> None:
        """Insert records whose ids are new (faster than upsert where the store checks for old rows)."""
        self.upsert(collection, records)

    def update_fields(self, collection: str, records: list[Record]) -> None:
        """Set the given fields of rows that exist (each record: `id`, the partition key, the fields to set), the
        other fields untouched; a row that does not exist is not created (the call fails). NotImplementedError
        where the store cannot (then a caller rewrites whole rows)."""
        raise NotImplementedError

    def field_names(self, collection: str) -> set[str] | None:
        """Return the fields of an existing collection (None: the store cannot tell)."""
        return None

    def collection_names(self) -> list[str]:
        """Return the names of the store's collections (empty: the store cannot tell)."""
        return []

    @abstractmethod
    def search_text(
        self, collection: str, query: str, *, limit: int, where: Filter, fields: list[str]
    ) -> list[Hit]:
        """Return BM25 hits, best first; scores are positive and comparable only within this call."""

    @abstractmethod
    def search_dense(
        self, collection: str, vector: list[float], *, limit: int, where: Filter, fields: list[str]
    ) -> list[Hit]:
        """Return dense (cosine) hits, best first; score is the cosine similarity."""

    @abstractmethod
    def query(
        self, collection: str, where: Filter, *, fields: list[str], limit: int, offset: int = 0
    ) -> list[Record]:
        """Return records matching a filter (no particular order)."""

    @abstractmethod
    def delete(self, collection: str, where: Filter) -> None:
        """Delete every record matching a filter."""

    @abstractmethod
    def flush(self) -> None:
        """Make pending writes durable and fast to search."""

    @abstractmethod
    def close(self) -> None:
        """Flush and release the store."""

    @abstractmethod
    def info(self) -> dict[str, Any]:
        """Return the store kind, version and location (no secrets)."""
