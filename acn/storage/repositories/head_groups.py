"""What memory heads tell the read cache about a group of rows it may load: a session's, a user's, a user's archive.

The read cache (acn/storage/database/lite/read_cache.py) names a group by (tenant, agent, part), the part being a
session id or a user's marker (memory_rows.user_group, user_turns_group); the heads answer by primary key.
"""

from __future__ import annotations

from acn.common.models import Namespace
from acn.storage.database import GroupKey, group_turns_user, group_user
from acn.storage.repositories.memory_heads import MemoryHeads


def group_known_empty(heads: MemoryHeads, key: GroupKey) -> bool:
    """Return True when the group certainly holds no row (its heads are absent)."""
    user, archive = group_user(key[2]), group_turns_user(key[2])
    if user is not None:
        return heads.user_empty(key[0], key[1], user)
    if archive is not None:
        return heads.user_empty(key[0], key[1], archive, "turns")
    return heads.readable_empty(key[0], Namespace(agent_id=key[1], session_id=key[2]))


def group_member_ids(heads: MemoryHeads, key: GroupKey) -> list[str] | None:
    """Return the ids the group's member pages list (None: not listed, the cache loads it by a filter)."""
    user, archive = group_user(key[2]), group_turns_user(key[2])
    if user is not None:
        return heads.user_member_ids(key[0], key[1], user)
    if archive is not None:
        return heads.user_member_ids(key[0], key[1], archive, "turns")
    return heads.member_ids(key[0], Namespace(agent_id=key[1], session_id=key[2]))
