"""Issue 3's scenario through HTTP: 60 turns recorded, then every buried fact is in a 2,000-token context."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from acn.text.tokens import load_tokenizer
from tests.conftest import post
from tests.long_conversation import LIVE_FACTS, QUESTIONS, SUPERSEDED, turn_messages

SYSTEM = "你是XX电商平台的客服助手，语气亲切，不得承诺超出政策范围的内容。"


@pytest.fixture(scope="module")
def recorded(app: Any) -> dict[str, Any]:
    """Record all 60 turns once for the module; return the namespace and the last response."""
    client = app.test_client()
    ns = {"agent_id": "cs-long", "session_id": "conv-60"}
    last: dict[str, Any] = {}
    compactions = []
    for turn in range(1, 61):
        # A small model window, so that compaction and segment merges happen within 60 turns.
        response = post(client, "record_turn", {**ns, "messages": turn_messages(turn),
                                                "compaction": {"context_window": 2000}})
        assert response.status_code == 200, response.get_data(as_text=True)
        last = response.get_json()
        assert last["turn"] == turn
        if last["compaction"]["compacted"]:
            compactions.append(last["compaction"])
    return {"ns": ns, "last": last, "compactions": compactions}


def assemble(client: FlaskClient, ns: dict[str, str], user_input: str, mode: str, max_tokens: int = 2000) -> dict[str, Any]:
    response = post(client, "assemble", {**ns, "max_tokens": max_tokens, "system_prompt": SYSTEM,
                                          "user_input": user_input, "mode": mode})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_compaction_ran_and_kept_every_number(recorded: dict[str, Any]) -> None:
    compactions = recorded["compactions"]
    assert compactions, "60 turns with tool JSON must trigger compaction"
    for compaction in compactions:
        stats = compaction["stats"]
        assert stats["numbers_preserved"] + stats["numbers_restored"] == stats["numbers_in_source"]
        assert stats["tokens_after"] < stats["tokens_before"]


def test_working_state_carries_every_live_fact(client: FlaskClient, recorded: dict[str, Any]) -> None:
    state = post(client, "session_state", recorded["ns"]).get_json()
    everything = state["working_summary"] + "\n" + "\n".join(m["content"] for m in state["buffer"])
    missing = [fact for fact in LIVE_FACTS if fact not in everything]
    assert missing == []
    assert len(state["segments"]) <= 5


@pytest.mark.parametrize("mode", ["snapshot", "focused", "streaming", "auto"])
def test_assembled_context_answers_every_buried_question(client: FlaskClient, recorded: dict[str, Any],
                                                          mode: str) -> None:
    tokenizer = load_tokenizer()
    for fact, question in QUESTIONS.items():
        body = assemble(client, recorded["ns"], question, mode)
        assert body["tokens"]["total"] <= 2000
        assert sum(tokenizer.count_message(m) for m in body["messages"]) == body["tokens"]["total"]
        assert fact in body["prompt"], f"{mode}: {fact!r} missing for {question!r}"
        assert body["messages"][0]["content"] == SYSTEM
        assert body["messages"][-1] == {**body["messages"][-1], "role": "user", "content": question}


@pytest.mark.parametrize("mode", ["snapshot", "focused", "streaming", "auto"])
def test_superseded_timeout_is_not_served(client: FlaskClient, recorded: dict[str, Any], mode: str) -> None:
    body = assemble(client, recorded["ns"], "对账接口的超时现在是多少？", mode)
    assert "45秒" in body["prompt"]
    assert SUPERSEDED not in body["prompt"]


def test_sources_carry_turn_ranges_and_caller_meta(client: FlaskClient, recorded: dict[str, Any]) -> None:
    body = assemble(client, recorded["ns"], "我之前那个订单号是多少？", "focused")
    from_memory = [s for s in body["sources"] if s["layer"] == "memory"]
    assert any(s["turn_range"] == [3, 3] and s["meta"].get("msg_id") == "u3" for s in from_memory)
    history = [s for s in body["sources"] if s["layer"] == "history"]
    assert history and all(s["kind"] == "turn" and s["turn_range"][0] == s["turn_range"][1] for s in history)
    assert history[-1]["turn_range"] == [60, 60]
    assert history[-1]["meta"] == {"messages": [{"msg_id": "u60"}, {"msg_id": "a60"}]}
