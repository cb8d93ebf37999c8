"""The compact node through HTTP: stateless and session modes, and the LLM engine via a loopback fake."""

from __future__ import annotations

import time
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.compaction_conversations import ZH_FINANCE_TURNS, conversation
from tests.conftest import post
from tests.fake_llm import FakeLLM

MESSAGES = [m.model_dump(exclude_none=True) for m in conversation(ZH_FINANCE_TURNS[:8])]


def compact(client: FlaskClient, ns: dict[str, str], **extra: Any) -> dict[str, Any]:
    response = post(client, "compact", {**ns, **extra})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_stateless_compaction_keeps_numbers_and_archives_turns(client: FlaskClient, ns: dict[str, str]) -> None:
    body = compact(client, ns, messages=MESSAGES, force=True, keep_recent=2, segment_size=6)
    assert body["compacted"] and body["reason"] == "forced" and body["engine_used"] == "extractive"
    assert [s["turn_range"] for s in body["segments"]] == [[1, 6]]
    assert [m["turn"] for m in body["recent_messages"]] == [7, 7, 8, 8]
    for value in ("ORD-20250317-8821", "12万", "62938471", "45秒", "2026年6月30日"):
        assert value in body["working_summary"] or value in str(body["segments"][0]["key_numbers"])
    stats = body["stats"]
    assert stats["numbers_preserved"] + stats["numbers_restored"] == stats["numbers_in_source"] > 0
    assert len(body["archived_ids"]) == 12
    turn3 = client.get(f"/v1/memories/{body['archived_ids'][4]}").get_json()["memory"]
    assert turn3["kind"] == "turn" and turn3["turn_range"] == [3, 3] and turn3["meta"]["role"] == "user"
    assert turn3["content"] == ZH_FINANCE_TURNS[2][0]


def test_below_trigger_does_nothing(client: FlaskClient, ns: dict[str, str]) -> None:
    body = compact(client, ns, messages=MESSAGES, context_window=100_000)
    assert body["compacted"] is False and body["reason"] == "below_trigger"
    assert body["archived_ids"] == [] and len(body["recent_messages"]) == len(MESSAGES)


def test_session_compaction_is_a_new_version(client: FlaskClient, ns: dict[str, str]) -> None:
    for user, assistant in ZH_FINANCE_TURNS[:8]:
        post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": user},
                                                        {"role": "assistant", "content": assistant}],
                                     "compact": False, "edit": False})
    body = compact(client, ns, force=True, keep_recent=2)
    assert body["compacted"] and body["version"] == 9
    assert body["archived_ids"] == []  # record_turn archived every message when it arrived
    state = post(client, "session_state", ns).get_json()
    assert state["segments"] == body["segments"] and len(state["buffer"]) == 4


@pytest.mark.usefixtures("allowed_fake_llm")  # a request-chosen URL needs the operator's consent
def test_llm_engine_drops_a_number_and_the_verifier_restores_it(client: FlaskClient, ns: dict[str, str],
                                                                 fake_llm: FakeLLM) -> None:
    fake_llm.reply_json({"goal": "把12万转到对公账户", "constraints": ["不要给我推荐新品"], "done": [], "todo": [],
                         "decisions": [{"decision": "超时改成45秒", "reason": "银行接口高峰期慢"}], "facts": [],
                         "key_numbers": {"金额": "12万", "超时": "45秒"}})
    body = compact(client, ns, messages=MESSAGES[:12], force=True, keep_recent=0, engine="llm",
                   llm={"base_url": fake_llm.base_url, "model": "fake", "timeout_seconds": 2})
    assert body["engine_used"] == "llm" and body["fallback_reason"] is None
    assert body["stats"]["numbers_restored"] > 0
    numbers = body["segments"][0]["key_numbers"]
    assert "62938471" in numbers.values() and "ORD-20250317-8821" in numbers.values()
    assert fake_llm.requests and fake_llm.requests[0]["json"]["model"] == "fake"


@pytest.mark.usefixtures("allowed_fake_llm")  # a request-chosen URL needs the operator's consent
def test_llm_invalid_json_falls_back_to_extractive(client: FlaskClient, ns: dict[str, str], fake_llm: FakeLLM) -> None:
    fake_llm.reply_text("this is not json")
    body = compact(client, ns, messages=MESSAGES[:12], force=True, keep_recent=0, engine="llm",
                   llm={"base_url": fake_llm.base_url, "model": "fake", "timeout_seconds": 2})
    assert body["engine_used"] == "extractive" and "LLM" in body["fallback_reason"]
    assert "62938471" in str(body["segments"][0]["key_numbers"]) or "62938471" in body["working_summary"]


@pytest.mark.usefixtures("allowed_fake_llm")  # a request-chosen URL needs the operator's consent
def test_llm_timeout_falls_back_within_the_timeout(client: FlaskClient, ns: dict[str, str], fake_llm: FakeLLM) -> None:
    fake_llm.reply_slow(3.0)
    started = time.monotonic()
    body = compact(client, ns, messages=MESSAGES[:12], force=True, keep_recent=0, engine="llm",
                   llm={"base_url": fake_llm.base_url, "model": "fake", "timeout_seconds": 0.5})
    elapsed = time.monotonic() - started
    assert body["engine_used"] == "extractive" and "timed out" in body["fallback_reason"]
    assert elapsed < 0.5 * 2 + 1.5  # timeout × (retries + 1) plus the extractive run, well under the 3 s reply


def test_llm_requested_without_an_endpoint_says_so(client: FlaskClient, ns: dict[str, str]) -> None:
    body = compact(client, ns, messages=MESSAGES[:12], force=True, keep_recent=0, engine="llm")
    assert body["engine_used"] == "extractive" and body["fallback_reason"] == "no LLM endpoint configured"


def record(client: FlaskClient, ns: dict[str, str], messages: list[dict[str, Any]], **options: Any) -> dict[str, Any]:
    response = post(client, "record_turn", {**ns, "messages": messages, "compaction": options})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def numbered_turn(i: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"第{i}笔：把{i}万转到账户{6293000 + i}，截止2026年{i % 12 + 1}月{i % 28 + 1}日"},
            {"role": "assistant", "content": f"好的，第{i}笔已登记，编号ORD-{20250000 + i}。"}]


@pytest.mark.parametrize("wait", [False, True])
def test_wait_for_segment_compacts_whole_segments_and_the_summary_stays_under_the_trigger(
        client: FlaskClient, ns: dict[str, str], wait: bool) -> None:
    # Every turn carries numbers. The summary used to grow past the trigger (1,200 tokens) without end; now it
    # rolls up at it (compaction.rollup), and waiting for a segment leaves only whole ones. Every compacted turn's
    # ID stays findable: in the summary, or word for word in the archive.
    options = {"context_window": 3000, "segment_size": 6, "keep_recent": 2, "wait_for_segment": wait}
    reasons = [record(client, ns, numbered_turn(i), **options)["compaction"]["reason"] for i in range(1, 61)]
    segments = post(client, "session_state", ns).get_json()["segments"]
    spans = [last - first + 1 for first, last in (s["turn_range"] for s in segments)]
    assert sum(s["tokens"] for s in segments) <= 1200
    if wait:
        assert "waiting_for_segment" in reasons and 4 <= reasons.count("triggered") <= 60 // 6 + 1
        assert all(span % 6 == 0 for span in spans)  # never a partial segment
    else:
        assert "waiting_for_segment" not in reasons and reasons[-6:] == ["triggered"] * 6
    archived = client.get("/v1/memories", query_string={**ns, "kinds": "turn", "limit": 500}).get_json()["memories"]
    for i in range(1, 30):
        assert f"ORD-{20250000 + i}" in str(segments) or any(f"ORD-{20250000 + i}" in m["content"] for m in archived)


def test_a_large_tool_output_compacts_before_a_segment_is_full(client: FlaskClient, ns: dict[str, str]) -> None:
    options = {"context_window": 2000, "segment_size": 6, "keep_recent": 1}
    rows = [{"order": f"ORD-{i:05d}", "amount": i * 7, "status": "shipped"} for i in range(300)]
    first = record(client, ns, [{"role": "user", "content": "查一下我的订单"},
                                {"role": "tool", "content": str(rows)},
                                {"role": "assistant", "content": "共300笔订单，都已发货。"}], **options)
    assert first["compaction"]["reason"] == "nothing_to_compact"  # the turn is the one kept verbatim
    second = record(client, ns, [{"role": "user", "content": "好的，谢谢"},
                                 {"role": "assistant", "content": "不客气"}], **options)
    assert second["compaction"]["compacted"] and second["compaction"]["reason"] == "triggered"
    assert second["buffer_tokens"] < 800
