"""How memory heads are named and what a row needs of them (memory_heads.py keeps them in the store).

A head is keyed by (kind, tenant, agent, session): a session's own rows, an agent's rows of other scopes, a user's
rows, a user's archived messages ("turns"), a tenant's shared rows; its id is a digest of that key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from acn.common.models import Memory, Namespace
from acn.common.stored import stamp_bounds
from acn.storage.database import CollectionSpec, Record

HEAD_FIELDS = {"tenant": "varchar", "agent_id": "varchar", "session_id": "varchar", "kind": "varchar",
               "high_ms": "int64", "ids": "json"}


def heads_spec(prefix: str) -> CollectionSpec:
    """Return the heads collection spec (no text search; the placeholder vector keeps Milvus happy)."""
    return CollectionSpec(name=f"{prefix}_memory_heads", scalar_fields=HEAD_FIELDS, partition_key="tenant")


def head_id(kind: str, tenant: str, agent_id: str = "", session_id: str = "") -> str:
    """Return the id of a head: a digest of what it names (the row's fields are checked after the read)."""
    raw = json.dumps([kind, tenant, agent_id, session_id])
    return "h" + kind[0] + hashlib.sha256(raw.encode("utf-8")).hexdigest()[:32]


HeadKey = tuple[str, str, str, str]  # kind, tenant, agent, session


def session_key(tenant: str, namespace: Namespace) -> HeadKey:
    """Return the head of one session's own rows."""
    return ("session", tenant, namespace.agent_id, namespace.session_id)


def group_keys(tenant: str, namespace: Namespace) -> list[HeadKey]:
    """The heads of every row a session can read (group_filter): its own, its agent's other scopes, shared."""
    return [session_key(tenant, namespace), ("agent", tenant, namespace.agent_id, ""), ("shared", tenant, "", "")]


def heads_of(tenant: str, rows: Iterable[Memory | Record]) -> dict[HeadKey, int]:
    """Return the heads a batch of memories needs, each with the newest stamp it carries."""
    needed: dict[HeadKey, int] = {}
    ceiling = stamp_bounds()[1]
    for row in rows:
        agent, session, scope, stamp, user, kind = (
            (row.agent_id, row.session_id, str(row.scope), max(row.updated_at, row.created_at), row.user_id or "",
             str(row.kind)) if isinstance(row, Memory) else
            (str(row["agent_id"]), str(row["session_id"]), str(row["scope"]), int(row.get("updated_at") or 0),
             str(row.get("user_id") or ""), str(row.get("kind") or "")))
        if stamp > ceiling:
            # A stamp beyond the stored-row bound (acn/common/stored.py) is no clock: a session's clock following
            # it overflowed int64 at its next write. The row still gets its heads (it is read, and reported as
            # dropped there); its stamp does not move them.
            stamp = 0
        for key in row_keys(tenant, agent, session, scope, user, kind):
            needed[key] = max(needed.get(key, 0), stamp)
    return needed


def owner_of(tenant: str, agent: str, session: str, scope: str, user: str = "") -> HeadKey:
    """Return the head whose member pages list a row: its session's (session scope), its user's (user scope), its
    agent's (agent scope), or shared."""
    if scope == "session":
        return ("session", tenant, agent, session)
    if scope == "user":
        return ("user", tenant, agent, user)
    return ("shared", tenant, "", "") if scope == "shared" else ("agent", tenant, agent, "")


def page_id(owner: HeadKey, page: int) -> str:
    """Return the id of an owner's member page number `page`."""
    return f"{head_id(*owner)}:{page}"


def archive_owner(tenant: str, agent: str, user: str, kind: str) -> HeadKey | None:
    """Return the head whose member pages list a user's archived message as well (None: not one)."""
    return ("turns", tenant, agent, user) if kind == "turn" and user else None


def row_keys(tenant: str, agent: str, session: str, scope: str, user: str = "", kind: str = "") -> list[HeadKey]:
    """Return the heads one row needs: its session's, its user's archive, and its scope's."""
    keys: list[HeadKey] = [("session", tenant, agent, session)]  # the clock counts every row of the session
    archive = archive_owner(tenant, agent, user, kind)
    if archive is not None:
        keys.append(archive)
    if scope == "shared":
        keys.append(("shared", tenant, "", ""))
    elif scope != "session":
        keys.append(("agent", tenant, agent, ""))  # "the agent has rows other than sessions'" (readable_empty)
        if scope == "user":
            keys.append(("user", tenant, agent, user))
    return keys
