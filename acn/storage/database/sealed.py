"""Encryption at rest for the memories collection: rows the store cannot read that its BM25 still searches.

With ACN_ENCRYPTION_KEY set, the repository writes memory rows through SealedStore, which seals them on the way
in and opens them on the way out (everything above it, the in-process index included, sees plain rows):
- `content`, the BM25 field, holds the row's tokens as the store's jieba analyzer makes them (text.terms.bm25_tokens,
  the tokens the in-process index ranks with), each replaced by a keyed hash: HMAC-SHA256 under a key derived
  from ACN_ENCRYPTION_KEY, cut to 40 bits, lower-case base32. A query is tokenized and hashed the same way, so the
  store's BM25 sees the same terms, term frequencies and lengths as the plain collection and ranks alike (two
  different tokens sharing a hash aside: about 1 in 10^12 per pair). The collection's analyzer only splits the
  hashes apart (milvus.ANALYZERS["hashed"]).
- `sealed` holds the content as Fernet ciphertext (AES-128-CBC + HMAC-SHA256, the snapshots' cipher).
- `key` holds a keyed hash of the key (another derived key): `key == {x}` filters work, their values are hashed
  on the way (rewrite); a filter on content, meta or a literal key is refused.
- `doc` (meta, source ids, history) holds {"sealed": Fernet ciphertext of the doc and the key}.
In the clear: ids, tenant, agent, session and user ids, scope, kind, importance, times, version, turn numbers,
superseded_by and dense vectors. What the hashes still tell: which rows share a token and how often, and lengths.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from functools import lru_cache
from typing import Any, ClassVar, NoReturn

from acn.common.errors import PackError
from acn.storage.database.base import CollectionSpec, Filter, Hit, MemoryStore, Record
from acn.storage.database.crypto import EncryptionKeyError, SnapshotCipher, derive_key
from acn.storage.database.lite.predicate import UnsupportedFilter, filter_tokens
from acn.text.terms import bm25_tokens

HASH_BYTES = 5  # 40 bits
HASH_CHARS = 8  # base32 of 5 bytes, no padding
# A VARCHAR holds 65,535 bytes: a row's first 7,281 hashed tokens (9 bytes each with the space) are searchable in
# the store. An archived row holds at most 8,000 characters; prose makes well under one token per character.
MAX_HASHED_TOKENS = 65535 // (HASH_CHARS + 1)
SEALED_FIELDS = ("content", "key", "doc")
CIPHER_FIELD = "sealed"
CACHED_HASHES = 1 << 16
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_SEALED_NAME = re.compile(r"\b(?:content|key|doc|sealed)\b")


class SealedFilterError(PackError):
    """A filter reads a field the store only holds encrypted (a bug in the caller, not bad input)."""

    code = "sealed_field_filter"


class RowSealer:
    """Seal memory rows for the store and open them again; hash text tokens and keys under derived keys."""

    def __init__(self, key: str) -> None:
        self.cipher = SnapshotCipher(key, what="memory row")
        self._token_key = derive_key(key, "acn memories token hash v1")
        self._key_key = derive_key(key, "acn memories key hash v1")
        self._digest_key = derive_key(key, "acn memories id digest v1")
        self._token = lru_cache(maxsize=CACHED_HASHES)(self._hash_token)

    def _hash_token(self, token: str) -> str:
        digest = hmac.digest(self._token_key, token.encode("utf-8", "surrogatepass"), "sha256")
        return base64.b32encode(digest[:HASH_BYTES]).decode("ascii").lower()

    def hashed_text(self, text: str) -> str:
        """Return the text's BM25 tokens as keyed hashes, space-separated (what the store indexes and searches)."""
        return " ".join(map(self._token, bm25_tokens(text)[:MAX_HASHED_TOKENS]))

    def key_hash(self, key: str) -> str:
        """Return the stored form of a memory key ("" stays "": a row without a key)."""
        if not key:
            return ""
        return "k" + hmac.new(self._key_key, key.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()[:32]

    def digest(self, text: str) -> str:
        """Return a keyed hex digest of text, for ids derived from content (a plain hash would confirm guesses)."""
        return hmac.new(self._digest_key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def seal(self, record: Record) -> Record:
        """Return the stored row of a plain memory row."""
        content, key = str(record["content"]), str(record.get("key") or "")
        doc = {"key": key, "doc": record.get("doc") or {}}
        sealed = {**record, "content": self.hashed_text(content), CIPHER_FIELD: self.cipher.seal(content),
                  "key": self.key_hash(key),
                  "doc": {CIPHER_FIELD: self.cipher.seal(json.dumps(doc, ensure_ascii=False))}}
        return sealed

    def open(self, row: Record, fields: list[str]) -> Record:
        """Return the plain row (with the asked-for fields) of a row read with store_fields(fields)."""
        plain = dict(row)
        if CIPHER_FIELD in plain:
            plain["content"] = self.cipher.open(plain.pop(CIPHER_FIELD))
        if "key" in fields or "doc" in fields:
            opened = json.loads(self.cipher.open((plain.pop("doc") or {})[CIPHER_FIELD]))
            if "key" in fields:
                plain["key"] = opened["key"]
            if "doc" in fields:
                plain["doc"] = opened["doc"]
        return plain

    def store_fields(self, fields: list[str]) -> list[str]:
        """Return the stored fields that hold the asked-for ones."""
        wanted = [field for field in fields if field not in SEALED_FIELDS]
        if "content" in fields:
            wanted.append(CIPHER_FIELD)
        if "key" in fields or "doc" in fields:
            wanted.append("doc")
        return wanted

    def rewrite(self, where: Filter) -> Filter:
        """Return the filter as the store must see it: key values hashed; any other sealed field refused."""
        hashed = _key_placeholders(where.template)
        if not hashed:
            return where
        params = dict(where.params)
        for name in hashed:
            value = params[name]
            params[name] = [self.key_hash(str(v)) for v in value] if isinstance(value, list | tuple) \
                else self.key_hash(str(value))
        return Filter(where.template, params)


@lru_cache(maxsize=512)
def _key_placeholders(template: str) -> frozenset[str]:
    """Return the placeholders compared with `key` (==, !=, in, not in); refuse any other use of a sealed field."""
    try:
        tokens = filter_tokens(template)
    except UnsupportedFilter as error:
        # Syntax the tokenizer does not read passes unchanged if no sealed field is named outside a string.
        if _SEALED_NAME.search(_STRING.sub('""', template)):
            raise SealedFilterError(f"cannot check a filter on encrypted memories: {error}") from None
        return frozenset()
    names: set[str] = set()
    for at, (kind, text) in enumerate(tokens):
        if kind != "word" or text not in (*SEALED_FIELDS, CIPHER_FIELD):
            continue
        rest = tokens[at + 1:]
        if text == "key":
            length = 2 if rest[:2] == [("word", "not"), ("word", "in")] else \
                1 if rest[:1] in ([("op", "==")], [("op", "!=")], [("word", "in")]) else 0
            value = rest[length] if length and len(rest) > length else ("", "")
            # A placeholder also used elsewhere would get its hashed value there too.
            if value[0] == "placeholder" and sum(token == value for token in tokens) == 1:
                names.add(value[1][1:-1])
                continue
        raise SealedFilterError(f"memories are encrypted at rest: a filter cannot read {text!r} "
                                "(only key ==, !=, in or not in a {placeholder})")
    return frozenset(names)


class SealedStore(MemoryStore):
    """A store whose named collections hold sealed memory rows; other collections pass through unchanged."""

    kind: ClassVar[str] = "sealed"
    supports_dense: ClassVar[bool] = True

    def __init__(self, inner: MemoryStore, sealer: RowSealer, collections: set[str]) -> None:
        self.inner = inner
        self.sealer = sealer
        self.collections = frozenset(collections)

    def __getattr__(self, name: str) -> Any:
        # is_server, uri, unflushed, …: what the repositories and the inspector read of the store itself.
        return getattr(self.inner, name)

    def ensure(self, spec: CollectionSpec) -> None:
        self.inner.ensure(spec)

    def exists(self, collection: str) -> bool:
        return self.inner.exists(collection)

    def upsert(self, collection: str, records: list[Record]) -> None:
        self.inner.upsert(collection, self._sealed(collection, records))

    def insert(self, collection: str, records: list[Record]) -> None:
        self.inner.insert(collection, self._sealed(collection, records))

    def update_fields(self, collection: str, records: list[Record]) -> None:
        if collection in self.collections and any(set(r) & {*SEALED_FIELDS, CIPHER_FIELD} for r in records):
            raise SealedFilterError("a partial update cannot set an encrypted field")  # only vectors and flags pass
        self.inner.update_fields(collection, records)

    def field_names(self, collection: str) -> set[str] | None:
        return self.inner.field_names(collection)

    def search_text(self, collection: str, query: str, *, limit: int, where: Filter,
                    fields: list[str]) -> list[Hit]:
        if collection not in self.collections:
            return self.inner.search_text(collection, query, limit=limit, where=where, fields=fields)
        hashed = self.sealer.hashed_text(query)
        if not hashed:
            return []
        hits = self.inner.search_text(collection, hashed, limit=limit, where=self.sealer.rewrite(where),
                                      fields=self.sealer.store_fields(fields))
        return [Hit(hit.id, hit.score, self.sealer.open(hit.record, fields)) for hit in hits]

    def search_dense(self, collection: str, vector: list[float], *, limit: int, where: Filter,
                     fields: list[str]) -> list[Hit]:
        if collection not in self.collections:
            return self.inner.search_dense(collection, vector, limit=limit, where=where, fields=fields)
        hits = self.inner.search_dense(collection, vector, limit=limit, where=self.sealer.rewrite(where),
                                       fields=self.sealer.store_fields(fields))
        return [Hit(hit.id, hit.score, self.sealer.open(hit.record, fields)) for hit in hits]

    def query(self, collection: str, where: Filter, *, fields: list[str], limit: int,
              offset: int = 0) -> list[Record]:
        if collection not in self.collections:
            return self.inner.query(collection, where, fields=fields, limit=limit, offset=offset)
        rows = self.inner.query(collection, self.sealer.rewrite(where), fields=self.sealer.store_fields(fields),
                                limit=limit, offset=offset)
        return [self.sealer.open(row, fields) for row in rows]

    def delete(self, collection: str, where: Filter) -> None:
        self.inner.delete(collection, self.sealer.rewrite(where) if collection in self.collections else where)

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def info(self) -> dict[str, Any]:
        return self.inner.info()

    def _sealed(self, collection: str, records: list[Record]) -> list[Record]:
        if collection not in self.collections:
            return records
        return [self.sealer.seal(record) for record in records]


class RefusedStore(MemoryStore):
    """The store of a repository that must not read or write its memories (a key mismatch): every read and write
    raises the reason, so each request gets the same clear error; flush, close and info pass through."""

    kind: ClassVar[str] = "refused"

    def __init__(self, inner: MemoryStore, reason: EncryptionKeyError) -> None:
        self.inner = inner
        self.reason = reason

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _refuse(self) -> NoReturn:
        raise EncryptionKeyError(self.reason.message)

    def ensure(self, spec: CollectionSpec) -> None:
        self._refuse()

    def exists(self, collection: str) -> bool:
        self._refuse()

    def upsert(self, collection: str, records: list[Record]) -> None:
        self._refuse()

    def insert(self, collection: str, records: list[Record]) -> None:
        self._refuse()

    def update_fields(self, collection: str, records: list[Record]) -> None:
        self._refuse()

    def field_names(self, collection: str) -> set[str] | None:
        return self.inner.field_names(collection)

    def search_text(self, collection: str, query: str, *, limit: int, where: Filter,
                    fields: list[str]) -> list[Hit]:
        self._refuse()

    def search_dense(self, collection: str, vector: list[float], *, limit: int, where: Filter,
                     fields: list[str]) -> list[Hit]:
        self._refuse()

    def query(self, collection: str, where: Filter, *, fields: list[str], limit: int,
              offset: int = 0) -> list[Record]:
        self._refuse()

    def delete(self, collection: str, where: Filter) -> None:
        self._refuse()

    def flush(self) -> None:
        self.inner.flush()

    def close(self) -> None:
        self.inner.close()

    def info(self) -> dict[str, Any]:
        return self.inner.info()


def sealing_problem(store: MemoryStore, spec: CollectionSpec, twin: CollectionSpec,
                    sealer: RowSealer | None) -> EncryptionKeyError | None:
    """Return why the memories cannot be served with this key setting, or None.

    `twin` is the collection of the other setting (plain when a key is set, sealed when not): rows there mean the
    store was written with the other setting. With a key, one stored row must open with it.
    """
    if store.exists(twin.name):
        store.ensure(twin)
        if store.query(twin.name, Filter(""), fields=["id"], limit=1):
            if sealer is not None:
                return EncryptionKeyError(
                    f"ACN_ENCRYPTION_KEY is set, but the memories in collection {twin.name} were written without it "
                    "(they are not encrypted): unset the key, or export them and import them with the key set")
            return EncryptionKeyError(f"the memories are encrypted (collection {twin.name}): set "
                                      "ACN_ENCRYPTION_KEY to the key they were written with")
    if sealer is not None:
        rows = store.query(spec.name, Filter(""), fields=["id", CIPHER_FIELD], limit=1)
        if rows:
            try:
                sealer.cipher.open(rows[0][CIPHER_FIELD])
            except EncryptionKeyError as error:
                return error
    return None
