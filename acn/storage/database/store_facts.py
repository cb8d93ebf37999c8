"""Facts about a whole store, kept in the store itself so that every replica reads the same ones.

- `encryption`: written when the store is first opened: "plain", or a known text sealed with ACN_ENCRYPTION_KEY.
  A start whose key setting does not match is refused (it would write plaintext into an encrypted store, or text
  under another key), whatever rows exist: the check does not depend on a memory row being there to open.
- `secret`: 32 random bytes made at the first start, for ids that must be deterministic but must not be guessable
  by another tenant (archived turn ids). Sealed with the key when there is one; never in a response or a log.

They are rows of the sessions collection under the empty tenant, which no API key can name (a tenant is a
non-empty identifier), in a row kind no session read selects.
"""

from __future__ import annotations

import logging
import secrets
import time

from acn.common.errors import StoreUnavailableError
from acn.storage.database.base import Filter, MemoryStore
from acn.storage.database.crypto import MARKER, EncryptionKeyError, SnapshotCipher

log = logging.getLogger("acn.store")

FACTS_TENANT = ""
FACT_ROW = "fact"
PLAIN = "plain"
CHECK_TEXT = "acn store key check v1"


def read_fact(store: MemoryStore, collection: str, name: str) -> str | None:
    """Return a stored fact's value, or None."""
    rows = store.query(collection, Filter("tenant == {ft} and row == {fr} and agent_id == {fn}",
                                          {"ft": FACTS_TENANT, "fr": FACT_ROW, "fn": name}),
                       fields=["chunk"], limit=1)
    return str(rows[0]["chunk"]) if rows else None


def write_fact(store: MemoryStore, collection: str, name: str, value: str) -> None:
    """Store a fact (replacing one of the same name)."""
    store.upsert(collection, [{"id": f"fact:{name}", "tenant": FACTS_TENANT, "agent_id": name, "session_id": "-",
                               "row": FACT_ROW, "version": 0, "part": 0, "parts": 0,
                               "created_at": int(time.time() * 1000), "chunk": value, "info": {},
                               "dense": [1.0, 0.0]}])


def check_encryption(store: MemoryStore, collection: str, cipher: SnapshotCipher, *, sealed_memories: bool) -> None:
    """Refuse (EncryptionKeyError) a key setting that does not match the store's marker; write the marker on the
    first start. `sealed_memories`: the encrypted memories collection exists (even empty: created with a key)."""
    marker = read_fact(store, collection, "encryption")
    if marker is None:
        # A new store, or one written before markers: its sessions and collections say how it was written.
        _check_unmarked(store, collection, cipher, sealed_memories)
        write_fact(store, collection, "encryption", cipher.seal(CHECK_TEXT) if cipher.enabled else PLAIN)
        return
    if marker == PLAIN:
        if cipher.enabled:
            raise EncryptionKeyError("ACN_ENCRYPTION_KEY is set, but this store was created without it (its rows "
                                     "are not encrypted): unset the key, or export the memories and import them "
                                     "into a new store with the key set")
        return
    if not cipher.enabled:
        raise EncryptionKeyError("this store is encrypted: set ACN_ENCRYPTION_KEY to the key it was created with")
    if cipher.open(marker) != CHECK_TEXT:  # a wrong key raises in open(); a right one gives the text back
        raise EncryptionKeyError("the store's key marker is damaged")


def _check_unmarked(store: MemoryStore, collection: str, cipher: SnapshotCipher, sealed_memories: bool) -> None:
    rows = store.query(collection, Filter("tenant != {ut} and row == {ur}", {"ut": FACTS_TENANT, "ur": "snapshot"}),
                       fields=["chunk"], limit=1)
    if rows and str(rows[0]["chunk"]).startswith(MARKER):
        cipher.open(str(rows[0]["chunk"]))  # no key, or another: refused with the reason
    elif rows and cipher.enabled:
        raise EncryptionKeyError("ACN_ENCRYPTION_KEY is set, but this store's sessions were written without it: "
                                 "unset the key")
    if sealed_memories and not cipher.enabled:
        raise EncryptionKeyError("this store is encrypted: set ACN_ENCRYPTION_KEY to the key it was created with")


def store_secret(store: MemoryStore, collection: str, cipher: SnapshotCipher) -> bytes:
    """Return the store's secret, made and stored at the first start (read back: a replica that raced keeps the
    stored one)."""
    stored = read_fact(store, collection, "secret")
    if stored is None:
        write_fact(store, collection, "secret", cipher.seal(secrets.token_hex(32)))
        stored = read_fact(store, collection, "secret")
        if stored is None:  # a server that does not read its own write at once
            raise StoreUnavailableError("the store's secret could not be read back after it was written")
    return bytes.fromhex(cipher.open(stored))
