"""The archive of raw turns: every message stored verbatim as `turn` memories before it leaves the buffer."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence

from acn.common.conversation import Turn
from acn.common.models import Memory, Message, Namespace
from acn.storage.repositories import MemoryRepository, new_memory_id

log = logging.getLogger("acn.archive")

# One archived row holds at most this much of a message; longer messages span several rows.
ARCHIVE_CHUNK_CHARS = 8000


def archive_turns(memories: MemoryRepository, tenant: str, namespace: Namespace,
                  turns: Sequence[Turn]) -> list[str]:
    """Store every message of the turns verbatim as `turn` memories before they leave the buffer."""
    return archive_new_turns(memories, tenant, namespace, turns, track=False)[0]


def archive_new_turns(memories: MemoryRepository, tenant: str, namespace: Namespace,
                      turns: Sequence[Turn], *, track: bool = True) -> tuple[list[str], set[str]]:
    """Archive the turns; return every row id and the ids this call created (the rows to discard if the turn's
    commit is then refused)."""
    rows, created = archive_batch(memories, tenant, namespace, turns, track=track)
    memories.save(tenant, rows, new_ids=created)
    return [row.id for row in rows], created


def archive_batch(memories: MemoryRepository, tenant: str, namespace: Namespace, turns: Sequence[Turn], *,
                  track: bool = True) -> tuple[list[Memory], set[str]]:
    """Return the archive rows of the turns, not saved yet, and the ids among them no row holds yet (inserted, not
    upserted; with `track` the rows a refused commit must take back). record_turn saves them with the turn's
    extracted memories: one insert and one head write for both (acn/memory/write.py, write_items' `carry`)."""
    rows: list[Memory] = []
    for turn in turns:
        for index, message in enumerate(turn.messages):
            rows += archive_rows(namespace, turn.number, index, message, memories.now_ms(tenant, namespace))
    # Ids derive from what is archived, so a retried request (after a store failure) rewrites the same
    # rows instead of adding duplicates.
    rows = [row.model_copy(update={"id": archive_id(tenant, row, memories.digest)}) for row in rows]
    ids = [row.id for row in rows]
    # Lite: the ids its cache knows to be new (inserted, not upserted). A server: the ids no row holds yet, asked
    # only by record_turn (`track`), whose refused commit must take exactly those back.
    created = (memories.new_ids(tenant, namespace, ids) if track
               else memories.kept.absent_archive_ids(tenant, namespace, ids))
    return rows, created


def discard_archive(memories: MemoryRepository, tenant: str, created: set[str]) -> None:
    """Delete archive rows a failed turn created; a failure here is logged, never raised over the first error."""
    if not created:
        return
    try:
        memories.delete_ids(tenant, sorted(created))
    except Exception as error:  # the turn's own error is the one the caller must see
        log.warning("could not discard the archive rows of a refused turn",
                    extra={"rows": len(created), "error": type(error).__name__})


def archive_rows(namespace: Namespace, turn: int, index: int, message: Message, now: int) -> list[Memory]:
    """Return the archive rows of one message (several when it is longer than one row holds)."""
    text = message.content or describe_tool_calls(message)
    pieces = [text[i:i + ARCHIVE_CHUNK_CHARS] for i in range(0, len(text), ARCHIVE_CHUNK_CHARS)] or [""]
    meta = {**message.meta, "role": message.role, "message_index": index}
    if message.name:
        meta["name"] = message.name
    if message.tool_call_id:
        meta["tool_call_id"] = message.tool_call_id
    if message.tool_calls:
        meta["tool_calls"] = message.tool_calls
    return [Memory(id=new_memory_id(), kind="turn", content=piece or "(empty)", importance=3, scope="session",
                   agent_id=namespace.agent_id, session_id=namespace.session_id, user_id=namespace.user_id,
                   created_at=now, updated_at=now, version=1, turn_range=[turn, turn],
                   meta={**meta, "part": part, "parts": len(pieces)} if len(pieces) > 1 else meta)
            for part, piece in enumerate(pieces)]


def archive_id(tenant: str, row: Memory, digest: Callable[[str], str]) -> str:
    """Return a deterministic id for an archived message part (digest: the repository's, keyed when encrypted)."""
    turn = (row.turn_range or [0])[0]
    key = json.dumps([tenant, row.agent_id, row.session_id, turn, row.meta.get("message_index"),
                      row.meta.get("part"), row.meta.get("role"), row.content], ensure_ascii=False)
    return "turn_" + digest(key)[:40]


def describe_tool_calls(message: Message) -> str:
    """Return a one-line text for a message that only carries tool calls."""
    names = [str((call.get("function") or {}).get("name", "tool")) for call in message.tool_calls or []]
    return f"[tool calls: {', '.join(names)}]" if names else ""
