"""MemoryWrite and MemoryRetrieve through the app, on a real Milvus Lite file."""

from __future__ import annotations

from typing import Any

from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import assert_error, post


def write(client: FlaskClient, ns: dict[str, str], items: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    response = post(client, "memory_write", {**ns, "items": items, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()["results"]


def retrieve(client: FlaskClient, ns: dict[str, str], query: str, **extra: Any) -> dict[str, Any]:
    response = post(client, "memory_retrieve", {**ns, "query": query, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_chinese_memory_written_and_retrieved_with_source_tag(client: FlaskClient, ns: dict[str, str]) -> None:
    results = write(client, ns, [
        {"kind": "identity", "content": "我是VIP客户，已开通自动退款权限", "turn": 10},
        {"kind": "constraint", "content": "不要给我推荐新品", "key": "推荐", "turn": 12},
        {"kind": "decision", "content": "超时时间设为30秒", "key": "超时", "turn": 20},
    ])
    assert [r["action"] for r in results] == ["added", "added", "added"]
    assert results[0]["version"] == 1
    body = retrieve(client, ns, "我之前设置的超时时间是多少？")
    assert body["triggered"] is True
    assert body["memories"][0]["content"] == "超时时间设为30秒"
    first_line = body["text"].splitlines()[0]
    assert first_line.startswith("[来自记忆 · 决策 · 第20轮]")
    assert "30秒" in first_line
    assert body["tokens"] > 0


def test_english_memory_tag_follows_query_language(client: FlaskClient, ns: dict[str, str]) -> None:
    write(client, ns, [{"kind": "preference", "content": "The user prefers replies in bullet points",
                        "turn_range": [3, 8]}])
    body = retrieve(client, ns, "How did I say I prefer replies?")
    assert body["text"].startswith("[from memory · preference · turns 3-8] The user prefers")
    parts = body["memories"][0]["score_parts"]
    assert set(parts) == {"relevance", "bm25", "dense", "importance", "recency"}
    assert 0 < body["memories"][0]["score"] <= 1


def test_exact_duplicate_is_not_written_twice(client: FlaskClient, ns: dict[str, str]) -> None:
    first = write(client, ns, [{"kind": "fact", "content": "订单号是 ORD-20250317-8821"}])[0]
    second = write(client, ns, [{"kind": "fact", "content": "订单号是 ORD-20250317-8821。"}])[0]
    assert second["action"] == "duplicate"
    assert second["id"] == first["id"] and second["version"] == 1
    listing = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"]}).get_json()
    assert len(listing["memories"]) == 1


def test_near_duplicate_updates_in_place_and_keeps_history(client: FlaskClient, ns: dict[str, str]) -> None:
    first = write(client, ns, [{"kind": "fact", "content": "用户的收货地址在上海市浦东新区张江路100号"}])[0]
    second = write(client, ns, [{"kind": "fact", "content": "用户的收货地址在上海市浦东新区张江路100号3楼"}],
                   dedupe_threshold=0.8)[0]
    assert second["action"] == "updated"
    assert second["id"] == first["id"] and second["version"] == 2
    memory = client.get(f"/v1/memories/{first['id']}").get_json()["memory"]
    assert memory["content"].endswith("3楼")
    assert memory["history"][0]["content"] == "用户的收货地址在上海市浦东新区张江路100号"
    assert memory["history"][0]["version"] == 1


def test_same_key_supersedes_and_old_value_is_not_served(client: FlaskClient, ns: dict[str, str]) -> None:
    old = write(client, ns, [{"kind": "decision", "content": "超时时间设为30秒", "key": "超时", "turn": 20}])[0]
    new = write(client, ns, [{"kind": "decision", "content": "超时改成45秒", "key": "超时", "turn": 35}])[0]
    assert new["action"] == "superseded" and new["superseded_ids"] == [old["id"]]
    assert new["version"] == 2
    body = retrieve(client, ns, "之前说的超时是多少")
    contents = [m["content"] for m in body["memories"]]
    assert "超时改成45秒" in contents and "超时时间设为30秒" not in contents
    with_history = retrieve(client, ns, "超时", include_superseded=True)
    stale = [m for m in with_history["memories"] if m["id"] == old["id"]]
    assert stale and stale[0]["superseded_by"] == new["id"] and stale[0]["valid_to"] >= stale[0]["created_at"]
    assert "已被取代" in with_history["text"]


def test_key_lookup_is_exact(client: FlaskClient, ns: dict[str, str]) -> None:
    write(client, ns, [{"kind": "decision", "content": "空值填充用中位数", "key": "空值填充"},
                       {"kind": "decision", "content": "去重按订单号", "key": "去重"}])
    body = retrieve(client, ns, "", key="空值填充")
    assert [m["content"] for m in body["memories"]] == ["空值填充用中位数"]


def test_timestamps_are_monotonic_within_a_session(client: FlaskClient, ns: dict[str, str]) -> None:
    items = [{"kind": "fact", "content": f"第{i}条事实：编号 A{i:04d}"} for i in range(30)]
    results = write(client, ns, items)
    memories = [client.get(f"/v1/memories/{r['id']}").get_json()["memory"] for r in results]
    stamps = [m["created_at"] for m in memories]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_scopes_user_memory_crosses_sessions_session_memory_does_not(client: FlaskClient, ns: dict[str, str]) -> None:
    user = {**ns, "user_id": "user-42"}
    write(client, user, [{"kind": "preference", "content": "喜欢简洁的回答", "scope": "user"},
                         {"kind": "fact", "content": "本次会话的工单号 TK-7781"}])
    other_session = {**user, "session_id": ns["session_id"] + "-b"}
    body = retrieve(client, other_session, "回答 工单号", top_k=5)
    contents = [m["content"] for m in body["memories"]]
    assert "喜欢简洁的回答" in contents
    assert "本次会话的工单号 TK-7781" not in contents
    stranger = {**other_session, "user_id": "user-43"}
    assert retrieve(client, stranger, "回答 工单号", top_k=5)["memories"] == []


def test_trigger_auto_only_when_query_refers_back(client: FlaskClient, ns: dict[str, str]) -> None:
    write(client, ns, [{"kind": "fact", "content": "退款金额是239元，原路返回"}])
    quiet = retrieve(client, ns, "今天天气怎么样", trigger="auto")
    assert quiet["triggered"] is False and quiet["memories"] == [] and quiet["text"] == ""
    loud = retrieve(client, ns, "刚才说的退款金额是多少", trigger="auto")
    assert loud["triggered"] is True and "239元" in loud["text"]


def test_top_k_and_item_token_limit(client: FlaskClient, ns: dict[str, str]) -> None:
    long_text = "退款规则说明：" + "用户申请退款后三个工作日内原路返回。" * 60
    write(client, ns, [{"kind": "knowledge", "content": long_text}] +
          [{"kind": "fact", "content": f"退款单号 RF-{i:05d} 已受理"} for i in range(6)])
    body = retrieve(client, ns, "退款", top_k=2, max_item_tokens=40)
    assert len(body["memories"]) == 2
    from acn.text.tokens import load_tokenizer

    tokenizer = load_tokenizer()
    assert all(tokenizer.count(m["content"]) <= 40 for m in body["memories"])


def test_extract_writes_events_and_skips_chitchat(client: FlaskClient, ns: dict[str, str]) -> None:
    messages = [
        {"role": "user", "content": "你好", "turn": 1},
        {"role": "user", "content": "我是VIP客户，已开通自动退款", "turn": 2},
        {"role": "assistant", "content": "好的，明白了", "turn": 2},
        {"role": "user", "content": "不要给我推荐新品", "turn": 3},
        {"role": "user", "content": "谢谢", "turn": 4},
    ]
    response = post(client, "memory_write", {**ns, "messages": messages, "extract": True})
    assert response.status_code == 200, response.get_data(as_text=True)
    results = response.get_json()["results"]
    kinds = {r["kind"] for r in results}
    contents = " ".join(r["content"] for r in results)
    assert "identity" in kinds and "constraint" in kinds
    assert "你好" not in contents and "谢谢" not in contents


def test_messages_accepted_as_json_string(client: FlaskClient, ns: dict[str, str]) -> None:
    import json

    messages = json.dumps([{"role": "user", "content": "我叫王小明，是Plus会员"}], ensure_ascii=False)
    response = post(client, "memory_write", {**ns, "messages": messages, "extract": True})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.get_json()["results"][0]["kind"] == "identity"


def test_redact_pii_before_storing(client: FlaskClient, ns: dict[str, str]) -> None:
    result = write(client, ns, [{"kind": "fact", "content": "我的手机号是13812341234"}], redact_pii=True)[0]
    assert "13812341234" not in result["content"] and "138****1234" in result["content"]


def test_empty_and_oversized_memories_are_422_and_store_nothing(client: FlaskClient, ns: dict[str, str]) -> None:
    assert_error(post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "   "}]}), 422)
    assert_error(post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "x" * 9000}]}), 422)
    assert_error(post(client, "memory_write", {**ns}), 422, "validation_error")
    listing = client.get("/v1/memories", query_string={"agent_id": ns["agent_id"]}).get_json()
    assert listing["memories"] == []


def test_dedup_in_a_large_namespace_stays_inside_the_namespace(fresh_app: Flask) -> None:
    # A namespace of a few thousand live memories (once past a limit where writes searched the store item by item)
    # is indexed whole: another agent's identical fact is not a duplicate, the agent's own is, a key supersedes.
    from acn.common.auth import DEFAULT_TENANT
    from acn.common.models import Memory
    from acn.storage.database.memory_rows import new_memory_id

    client = fresh_app.test_client()
    big, other = {"agent_id": "big", "session_id": "s1"}, {"agent_id": "someone-else", "session_id": "s1"}
    filler = [Memory(id=new_memory_id(), kind="fact", content=f"第{i}条背景资料：编号{i * 7919}", scope="session",
                     agent_id="big", session_id="s1", created_at=i + 1, updated_at=i + 1, version=1, importance=5.0)
              for i in range(2_001)]
    fresh_app.extensions["acn"].memories.save(DEFAULT_TENANT, filler)
    text = "客户的发票抬头是星辰科技有限公司"
    assert post(client, "memory_write", {**other, "items": [{"kind": "fact", "content": text}]}).get_json()[
        "results"][0]["action"] == "added"
    first = post(client, "memory_write", {**big, "items": [{"kind": "fact", "content": text}]}).get_json()
    assert first["results"][0]["action"] == "added"
    again = post(client, "memory_write", {**big, "items": [{"kind": "fact", "content": text}]}).get_json()
    assert again["results"][0]["action"] == "duplicate"
    assert again["results"][0]["id"] == first["results"][0]["id"]
    old = post(client, "memory_write", {**big, "items": [{"kind": "decision", "content": "超时设为30秒",
                                                          "key": "超时"}]}).get_json()["results"][0]
    new = post(client, "memory_write", {**big, "items": [{"kind": "decision", "content": "超时改为45秒",
                                                          "key": "超时"}]}).get_json()["results"][0]
    assert new["action"] == "superseded" and new["superseded_ids"] == [old["id"]]
