"""How a session's state is stored as rows: the sessions collection, and snapshots compressed and cut in chunks."""

from __future__ import annotations

import base64
import zlib

from acn.storage.database import CollectionSpec

SESSION_FIELDS = {
    "tenant": "varchar", "agent_id": "varchar", "session_id": "varchar", "row": "varchar",
    "version": "int64", "part": "int64", "parts": "int64", "created_at": "int64", "chunk": "varchar",
    "info": "json",
}
# VARCHAR limits are in bytes on Milvus servers: stay well below 65,535 whatever the script.
CHUNK_BYTES = 60_000
# Snapshots longer than this are stored zlib-compressed (base64, marked): a long session's state is mostly
# repeated JSON structure, every turn writes a version of it, and the store's client converts every character.
COMPRESS_ABOVE = 4096
COMPRESSED = "z1:"


def session_spec(prefix: str) -> CollectionSpec:
    """Return the sessions collection spec (no text search; a tiny vector keeps Milvus happy)."""
    return CollectionSpec(name=f"{prefix}_sessions", scalar_fields=SESSION_FIELDS, partition_key="tenant")


def pack(text: str) -> str:
    """Return the snapshot text as stored: compressed and marked when long (JSON never starts with the mark)."""
    if len(text) <= COMPRESS_ABOVE:
        return text
    return COMPRESSED + base64.b64encode(zlib.compress(text.encode("utf-8"), 1)).decode("ascii")


def unpack(stored: str) -> str:
    """Return the snapshot text of what pack stored (plain snapshots of earlier versions pass unchanged)."""
    if not stored.startswith(COMPRESSED):
        return stored
    return zlib.decompress(base64.b64decode(stored[len(COMPRESSED):])).decode("utf-8")


def chunk_text(text: str, limit: int = CHUNK_BYTES) -> list[str]:
    """Split text into pieces of at most `limit` UTF-8 bytes, never inside a character."""
    if limit < 4:
        raise ValueError("a chunk must hold any UTF-8 character (4 bytes)")
    data = text.encode("utf-8")
    chunks: list[str] = []
    start = 0
    while len(data) - start > limit:
        end = start + limit
        while data[end] & 0xC0 == 0x80:  # a continuation byte: the cut would split a character
            end -= 1
        chunks.append(data[start:end].decode("utf-8"))
        start = end
    chunks.append(data[start:].decode("utf-8"))
    return chunks
