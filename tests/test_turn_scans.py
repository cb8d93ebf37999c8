"""Issue 47: a late turn of a chat reads the store by primary key only, so its cost does not grow with the other
sessions a store holds (32 chats of 300 turns served 0.56 × the turns/s of 32 chats of 50: each version prune of
each chat scanned every session's rows, 9 ms with one chat, 216 ms with 32).

Rows read are counted as in tests/test_new_session_cost.py: a filter that is exactly `id in [...]` reads the ids it
names, anything else every row of the collection.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Namespace
from acn.server import create_app
from acn.storage.repositories.sessions import PRUNE_EVERY
from bench.long_session import answer_message, user_message
from tests.conftest import make_settings, post
from tests.test_new_session_cost import Counted, other_rows

KEPT = 5


def turn(client: object, session: str, number: int, rng: random.Random) -> None:
    ns = {"agent_id": "kefu", "session_id": session}
    asked = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 1500,
                                      "user_input": user_message(number, rng)})
    assert asked.status_code == 200, asked.get_json()
    recorded = post(client, "record_turn", {**ns, "messages": [
        {"role": "user", "content": user_message(number, rng)},
        {"role": "assistant", "content": answer_message(number, rng)}]})
    assert recorded.status_code == 200, recorded.get_json()


def test_late_turns_and_their_version_prunes_scan_no_collection(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path, session_versions_kept=KEPT))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        runtime.memories.save(DEFAULT_TENANT, other_rows(200))
        rng = random.Random(5)
        for number in range(1, 3 * PRUNE_EVERY + 1):
            turn(client, "chat", number, rng)
        runtime.store.flush()
        counted = Counted(runtime.store)
        for number in range(3 * PRUNE_EVERY + 1, 5 * PRUNE_EVERY + 1):  # two prunes in these turns
            turn(client, "chat", number, rng)
        assert [call for call in counted.calls if call[0] == "delete"], "no prune ran in the counted turns"
        assert [call for call in counted.calls if call[3]] == []
        # And the prunes left the kept versions, the newest one's rows whole.
        versions = [v.version for v in runtime.sessions.versions(DEFAULT_TENANT,
                                                                   Namespace(agent_id="kefu", session_id="chat"))]
        head = runtime.sessions.head_version(DEFAULT_TENANT, Namespace(agent_id="kefu", session_id="chat"))
        assert versions[-1] == head and head - versions[0] < KEPT + PRUNE_EVERY
        assert set(range(head - KEPT + 1, head + 1)) <= set(versions)
        state = post(client, "session_state", {"agent_id": "kefu", "session_id": "chat"}).get_json()
        assert state["version"] == head
    finally:
        runtime.close()


def test_deleting_a_memory_by_id_reads_by_primary_key_and_stays_in_its_tenant(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        ns = {"agent_id": "kefu", "session_id": "chat"}
        written = post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "客户的会员等级是金卡"}]})
        memory_id = written.get_json()["results"][0]["id"]
        runtime.store.flush()
        counted = Counted(runtime.store)
        runtime.memories.delete_ids(DEFAULT_TENANT, [memory_id])
        deletes = [call for call in counted.calls if call[0] == "delete"]
        assert len(deletes) == 1 and not deletes[0][3]
        found = post(client, "memory_retrieve", {**ns, "query": "会员等级"}).get_json()
        assert found["memories"] == []
    finally:
        runtime.close()


def test_a_turn_writes_its_archive_and_its_memories_in_one_save(tmp_path: Path) -> None:
    # The archived messages and the facts extracted from them were two saves, each an insert and a head write:
    # four of a turn's six store round trips. Now one save (one rows write, one heads write) holds both.
    app = create_app(make_settings(tmp_path))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        rng = random.Random(9)
        for number in range(1, 4):
            turn(client, "chat", number, rng)
        writes: list[tuple[str, int]] = []
        for name in ("upsert", "insert"):
            original = getattr(runtime.store, name)

            def counted(collection: str, records: list[dict[str, object]], original: Any = original) -> None:
                if records:
                    writes.append((collection, len(records)))
                original(collection, records)
            setattr(runtime.store, name, counted)
        said = "我的订单号 ORD-20251205-7788 的退款金额是 365 元，请尽快处理"
        recorded = post(client, "record_turn", {"agent_id": "kefu", "session_id": "chat", "messages": [
            {"role": "user", "content": said}, {"role": "assistant", "content": "好的，已登记。"}]}).get_json()
        added = [m for m in recorded["memories"] if m["action"] == "added"]
        assert added and len(recorded["archived_ids"]) == 2
        memories, heads = runtime.memories.spec.name, runtime.memories.heads.spec.name
        assert [count for collection, count in writes if collection == memories] == [2 + len(added)]
        assert len([collection for collection, _ in writes if collection == heads]) == 1
        stored = {m.id for m in runtime.memories.get_many(DEFAULT_TENANT, [*recorded["archived_ids"],
                                                                           *(m["id"] for m in added)])}
        assert stored == {*recorded["archived_ids"], *(m["id"] for m in added)}
    finally:
        runtime.close()
