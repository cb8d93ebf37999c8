"""With ACN_ENCRYPTION_KEY set, no stored file holds the plaintext of a memory, an archived turn, a key or meta,
and search still finds them (issue 16 M3)."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cryptography.fernet import Fernet
from flask import Flask

from acn.common.models import Namespace
from acn.memory.items import MemoryItem
from acn.memory.write import new_memory
from acn.server import create_app
from acn.storage.database.base import Filter
from acn.storage.database.crypto import EncryptionKeyError
from acn.storage.database.memory_rows import scope_filter
from acn.storage.database.milvus import MilvusStore
from acn.storage.database.sealed import RowSealer, SealedFilterError
from acn.storage.repositories.memories import MemoryRepository
from tests.conftest import make_settings, post

# Canaries: words no analyzer, hash or ciphertext produces by chance. Chinese and English, plus personal data.
EN_WORD = "quokkazephyr"
ZH_WORD = "翡翠鹦鹉"
KEY = "canary-key-okapi"
META = "meta-canary-narwhal"
TOOL_ARGUMENT = "tool-canary-axolotl"
PII = {"phone": "13987654321", "email": "wang.wu@example.org", "id_card": "11010519851231621X",
       "card": "6222020202020202020"}
CANARIES = [EN_WORD, ZH_WORD, KEY, META, TOOL_ARGUMENT, "ORD-77431", *PII.values()]
NS = {"agent_id": "agent-a", "session_id": "session-s", "user_id": "user-u"}


def _forms(canary: str) -> list[bytes]:
    """The byte forms a plaintext could take in a file: UTF-8 (also lower case), JSON-escaped, UTF-16."""
    forms = {canary.encode("utf-8"), canary.lower().encode("utf-8"), json.dumps(canary)[1:-1].encode("ascii"),
             canary.encode("utf-16-le")}
    return sorted(forms)


def plaintext_hits(root: Path) -> list[tuple[str, str]]:
    """Return (file, canary) for every canary found in any byte form in any file under root.

    Lite's segments are Parquet with Snappy compression, where a repeated string may be a back-reference rather
    than its bytes: Parquet and Arrow (write-ahead log) files are also decoded and their values searched.
    """
    hits = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            data = path.read_bytes() + _decoded(path)
        except FileNotFoundError:  # a write-ahead log the flusher removed meanwhile: its rows are in a segment
            continue
        hits += [(str(path.relative_to(root)), canary) for canary in CANARIES if any(f in data for f in _forms(canary))]
    return hits


def _decoded(path: Path) -> bytes:
    if path.suffix == ".parquet":
        table = pq.read_table(path)
    elif path.suffix == ".arrow":
        try:
            table = pa.ipc.open_stream(pa.memory_map(str(path))).read_all()
        except pa.ArrowInvalid:  # empty or being written: its raw bytes were searched
            return b""
    else:
        return b""
    return json.dumps(table.to_pylist(), ensure_ascii=False, default=str).encode("utf-8")


def _fill(client: Any) -> None:
    """Write every kind of stored text: turns (with meta and tool calls), memories with a key, a compaction."""
    for turn in range(3):
        messages = [
            {"role": "user", "meta": {"source": META},
             "content": f"我的手机是{PII['phone']}，邮箱 {PII['email']}，暗号是{ZH_WORD}。订单 ORD-77431 第{turn}次"},
            {"role": "assistant", "content": f"Noted: the code word is {EN_WORD}, card {PII['card']}.",
             "tool_calls": [{"id": f"call_{turn}", "type": "function",
                             "function": {"name": "lookup", "arguments": json.dumps({"q": TOOL_ARGUMENT})}}]},
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": f"身份证 {PII['id_card']} verified"},
        ]
        response = post(client, "record_turn", {**NS, "messages": messages})
        assert response.status_code == 200, response.get_json()
    items = [{"kind": "decision", "key": KEY, "content": f"Ship with {EN_WORD} enabled", "meta": {"by": META}},
             {"kind": "fact", "scope": "user", "content": f"用户喜欢{ZH_WORD}，电话{PII['phone']}"}]
    assert post(client, "memory_write", {**NS, "items": items}).status_code == 200
    assert post(client, "compact", {**NS, "force": True, "keep_recent": 1}).status_code == 200


def _found(client: Any, **body: Any) -> list[str]:
    response = post(client, "memory_retrieve", {**NS, "top_k": 10, **body})
    assert response.status_code == 200, response.get_json()
    return [m["content"] for m in response.get_json()["memories"]]


def _check_search(client: Any) -> None:
    assert any(EN_WORD in text for text in _found(client, query=f"what is {EN_WORD}?"))
    assert any(ZH_WORD in text for text in _found(client, query=f"{ZH_WORD}是什么"))
    archived = _found(client, query=f"{ZH_WORD} 手机", kinds=["turn"])
    assert archived and all(ZH_WORD in text for text in archived[:3])
    assert _found(client, key=KEY) == [f"Ship with {EN_WORD} enabled"]


@pytest.fixture()
def key() -> str:
    return Fernet.generate_key().decode()


@pytest.mark.parametrize(("index_rows", "embedder"), [(50_000, "none"), (0, "none"), (0, "hash")],
                         ids=["in-process index", "store BM25", "store hybrid"])
def test_no_plaintext_in_any_store_file_and_search_still_works(tmp_path: Path, key: str, index_rows: int,
                                                                embedder: str) -> None:
    settings = {"encryption_key": key, "local_index_rows": index_rows, "embedder": embedder}
    app = create_app(make_settings(tmp_path, **settings))
    try:
        client = app.test_client()
        _fill(client)
        _check_search(client)
        assert plaintext_hits(tmp_path / "memory.db") == []  # whatever is in the write-ahead log or segments now
    finally:
        app.extensions["acn"].close()
    store_dir = tmp_path / "memory.db"
    assert sum(p.stat().st_size for p in store_dir.rglob("*") if p.is_file()) > 10_000  # the rows are in there
    assert plaintext_hits(store_dir) == []
    reopened = create_app(make_settings(tmp_path, **settings))
    try:  # after a restart (rows read back from segments, not from this process's memory)
        _check_search(reopened.test_client())
    finally:
        reopened.extensions["acn"].close()


def test_without_the_key_or_with_another_the_memories_are_refused(tmp_path: Path, key: str) -> None:
    app = create_app(make_settings(tmp_path, encryption_key=key))
    try:
        _fill(app.test_client())
    finally:
        app.extensions["acn"].close()
    # Refused at start, with the reason (served, requests would answer 500 and /healthz ok).
    for settings, says in ((make_settings(tmp_path), "set ACN_ENCRYPTION_KEY"),
                           (make_settings(tmp_path, encryption_key=Fernet.generate_key().decode()), "not the key")):
        with pytest.raises(EncryptionKeyError, match=says):
            create_app(settings)
    again = create_app(make_settings(tmp_path, encryption_key=key))  # nothing was lost or overwritten meanwhile
    try:
        _check_search(again.test_client())
    finally:
        again.extensions["acn"].close()


def test_a_key_set_on_a_store_written_without_one_is_refused(tmp_path: Path, key: str) -> None:
    plain = create_app(make_settings(tmp_path))
    try:
        written = post(plain.test_client(), "memory_write", {**NS, "items": [{"content": f"plain {EN_WORD}"}]})
        assert written.status_code == 200
    finally:
        plain.extensions["acn"].close()
    with pytest.raises(EncryptionKeyError, match="written without it"):
        create_app(make_settings(tmp_path, encryption_key=key))


@pytest.fixture(params=["embedded", "server"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MilvusStore]:
    uri = str(tmp_path / "memory.db") if request.param == "embedded" else request.getfixturevalue("lite_server")
    opened = MilvusStore(uri).open()
    yield opened
    opened.close()


def _repository(store: MilvusStore, prefix: str, sealer: RowSealer | None) -> MemoryRepository:
    prefix += uuid.uuid4().hex[:8]  # the server is shared by the whole test session
    repository = MemoryRepository(store, prefix=prefix, embedder=None, index_rows=0, sealer=sealer)
    repository.open()
    return repository


def test_store_bm25_over_hashed_tokens_ranks_as_over_the_tokens(store: MilvusStore, key: str) -> None:
    texts = ["超时时间设为30秒", "我是VIP客户", "不要给我推荐新品", "退款金额239元", "the refund was 239 yuan",
             "set the timeout to 30 seconds", "VIP customers get free shipping", "超时以后自动退款",
             "Caroline adopted a cat named Milo", "the cat sleeps on the sofa all day"]
    ns = Namespace(agent_id="a", session_id="s")
    plain, sealed = _repository(store, "plain", None), _repository(store, "sealed", RowSealer(key))
    for repository in (plain, sealed):
        repository.save("t1", [new_memory(ns, MemoryItem(content=t), repository.now_ms("t1", ns)) for t in texts])
    store.flush()
    for query in ["超时参数", "退款多少", "VIP", "timeout seconds", "cat Milo", "239", "free shipping sofa"]:
        expected = [(h.memory.content, round(h.bm25, 4)) for h in plain.search("t1", query, scope_filter(ns), limit=5)]
        got = [(h.memory.content, round(h.bm25, 4)) for h in sealed.search("t1", query, scope_filter(ns), limit=5)]
        assert got == expected, query


def test_key_filters_are_hashed_and_other_sealed_fields_refused(store: MilvusStore, key: str) -> None:
    ns = Namespace(agent_id="a", session_id="s")
    sealed = _repository(store, "keys", RowSealer(key))
    first = new_memory(ns, MemoryItem(kind="decision", key="db.engine", content="use postgres"), 1)
    second = new_memory(ns, MemoryItem(kind="decision", key="db.pool", content="pool of 10"), 2)
    sealed.save("t1", [first, second])
    found = sealed.find("t1", Filter("key == {k}", {"k": "db.engine"}), limit=10)
    assert [m.content for m in found] == ["use postgres"]
    assert [m.content for m in sealed.find("t1", Filter("key in {k}", {"k": ["db.pool"]}), limit=10)] == ["pool of 10"]
    assert [m.key for m in sealed.find("t1", Filter("key != {k}", {"k": "db.pool"}), limit=10)] == ["db.engine"]
    for template in ['content like "use%"', 'key == "db.engine"', "doc is not null"]:
        with pytest.raises(SealedFilterError):
            sealed.find("t1", Filter(template), limit=10)
    stored = store.query(sealed.spec.name, Filter(""), fields=["key", "content", "doc", "sealed"], limit=10)
    assert {row["key"] for row in stored}.isdisjoint({"db.engine", "db.pool"})
    assert not any("postgres" in json.dumps(row, ensure_ascii=False) for row in stored)


def test_archived_turn_ids_are_keyed_digests(tmp_path: Path, key: str) -> None:
    """An id derived from the content by a plain hash would let anyone holding the files confirm a guessed line."""
    ids = []
    for folder, settings in (("plain", {}), ("keyed", {"encryption_key": key})):
        app: Flask = create_app(make_settings(tmp_path / folder, **settings))
        try:
            response = post(app.test_client(), "record_turn", {**NS, "messages": [{"role": "user", "content": "yes"}]})
            ids.append(response.get_json()["archived_ids"][0])
        finally:
            app.extensions["acn"].close()
    plain = json.dumps(["default", NS["agent_id"], NS["session_id"], 1, 0, None, "user", "yes"], ensure_ascii=False)
    # Not a plain hash even without a key: keyed with the store's secret (issue 34: another tenant predicted them).
    assert ids[0] != "turn_" + hashlib.sha256(plain.encode("utf-8")).hexdigest()[:40]
    assert ids[1] != ids[0]


@pytest.mark.parametrize("index_rows", [50_000, 0], ids=["in-process index", "store BM25"])
def test_dedup_and_supersede_by_key_act_as_without_encryption(tmp_path: Path, key: str, index_rows: int) -> None:
    contents = ["use postgres 16 for the orders service", "use postgres 16 for the orders service",
                "use postgres 16 for the order service", "use mysql 8 for the orders service"]
    outcomes = []
    for folder, settings in (("plain", {}), ("keyed", {"encryption_key": key})):
        app = create_app(make_settings(tmp_path / folder, local_index_rows=index_rows, **settings))
        try:
            client = app.test_client()
            items = [[{"kind": "decision", "key": "db.engine", "content": text}] for text in contents]
            actions = [post(client, "memory_write", {**NS, "items": item}).get_json()["results"][0]["action"]
                       for item in items]
            found = post(client, "memory_retrieve", {**NS, "key": "db.engine", "include_superseded": True}).get_json()
            outcomes.append((actions, sorted((m["content"], bool(m["superseded_by"])) for m in found["memories"])))
        finally:
            app.extensions["acn"].close()
    assert outcomes[0] == outcomes[1]
    assert outcomes[1][0] == ["added", "duplicate", "superseded", "superseded"]
