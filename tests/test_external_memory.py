"""Dify Agent V2 external memory (memory_prepare / memory_observe) through the real server on loopback."""

from __future__ import annotations

import itertools
import re
import uuid
from typing import Any

import pytest
import requests
from flask.testing import FlaskClient

from acn.common.models import IDENTIFIER_PATTERN
from acn.nodes.external_memory import MemoryContext, user_of
from tests.conftest import assert_error, post
from tests.integration_support import LiveServer

pytest_plugins = ("tests.integration_fixtures",)


def context(tag: str, kind: str = "user") -> dict[str, str]:
    return {"app_id": f"app-{tag}", "subject_kind": kind, "subject_id": f"user-{tag}"}


def observe(server: LiveServer, ctx: dict[str, str], event: str, payload: Any, event_id: str, sequence: int,
            run: str) -> dict[str, Any]:
    body = {"memory_context": ctx, "request": {"event_id": event_id, "event": event, "sequence": sequence,
                                               "payload": payload, "metadata": {"run_id": run},
                                               "max_bytes": 8192}}
    response = server.post("memory_observe", body)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def prepare(server: LiveServer, ctx: dict[str, str], query: str, max_bytes: int) -> dict[str, Any]:
    response = server.post("memory_prepare", {"memory_context": ctx,
                                              "request": {"query": query, "max_bytes": max_bytes}})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def session_turns(server: LiveServer, ctx: dict[str, str], run: str) -> list[dict[str, Any]]:
    """The archived messages of the run's session (every message stored, as recall sees it)."""
    response = requests.get(f"{server.base_url}/v1/memories", timeout=60,
                            params={"agent_id": ctx["app_id"], "session_id": run, "kinds": "turn"},
                            headers={"Authorization": f"Bearer {server.api_key}"})
    assert response.status_code == 200, response.text
    memories: list[dict[str, Any]] = response.json()["memories"]
    return memories


def run_events(tag: str) -> list[tuple[str, Any]]:
    return [("user_prompt", {"text": "以后请只用中文回答，我的预算上限是 3000 元 🙂"}),
            ("tool_call", {"tool_call_id": "c1", "tool_name": "search_flights", "arguments": {"to": "成都"}}),
            ("tool_result", {"tool_call_id": "c1", "tool_name": "search_flights", "result": "CA4101 ¥1280"}),
            ("model_response", {"text": "好的，CA4101 票价 1280 元，在预算内。"}),
            ("run_end", {"status": "succeeded"})]


def test_observe_records_a_run_once_even_when_events_are_redelivered(live_server: LiveServer) -> None:
    tag = uuid.uuid4().hex[:8]
    ctx, run = context(tag), f"run-{tag}"
    answers = []
    for sequence, (event, payload) in enumerate(run_events(tag)):
        event_id = f"evt-{tag}-{sequence}"
        answers.append(observe(live_server, ctx, event, payload, event_id, sequence, run))
        # Dify retries a callback whose answer it did not get: the same event_id again.
        again = observe(live_server, ctx, event, payload, event_id, sequence, run)
        assert again["status"] == "accepted" and again["recorded"] is False
    assert [a["status"] for a in answers] == ["accepted"] * 5
    assert [a["recorded"] for a in answers] == [True, True, True, True, False]  # run_end stores nothing
    assert {a["session_id"] for a in answers} == {run}
    assert [a["turn"] for a in answers[:4]] == [1, 1, 1, 1]  # the prompt opens a turn, the rest joins it
    stored = session_turns(live_server, ctx, run)
    roles = sorted(m["meta"]["role"] for m in stored)
    assert roles == ["assistant", "assistant", "tool", "user"], stored
    assert sorted(m["meta"]["event_id"] for m in stored) == [f"evt-{tag}-{i}" for i in range(4)]
    tool_call = next(m for m in stored if m["meta"].get("tool_calls"))
    assert tool_call["meta"]["tool_calls"][0]["function"]["name"] == "search_flights"
    assert next(m for m in stored if m["meta"]["role"] == "tool")["meta"]["tool_call_id"] == "c1"


@pytest.mark.parametrize("max_bytes", [512, 32768])
def test_prepare_answers_exact_utf8_sizes_within_max_bytes(live_server: LiveServer, max_bytes: int) -> None:
    tag = uuid.uuid4().hex[:8]
    ctx = context(tag)
    # Many Chinese and emoji memories: more than 512 bytes together, so the small budget must cut.
    items = [{"kind": "preference", "content": f"用户偏好第{i}条：喜欢🍜和🌶️，靠窗座位，预算 {1000 + i} 元",
              "key": f"pref_{i}", "scope": "user"} for i in range(30)]
    written = live_server.post("memory_write", {"agent_id": ctx["app_id"], "session_id": "s-write",
                                                "user_id": ctx["subject_id"], "items": items})
    assert written.status_code == 200, written.text
    answer = prepare(live_server, ctx, "我有什么偏好？预算多少？", max_bytes)
    assert answer["status"] == "ready"
    assert answer["content_bytes"] == len(answer["content"].encode("utf-8")) <= max_bytes
    assert "🍜" in answer["content"]
    if max_bytes == 512:
        assert answer["content_bytes"] > 256  # cut to the budget, not emptied by it
    assert set(answer) >= {"status", "content", "content_bytes"}


def test_prepare_is_empty_for_a_subject_with_no_memories(live_server: LiveServer) -> None:
    answer = prepare(live_server, context(uuid.uuid4().hex[:8]), "我之前说过什么？", 8000)
    assert (answer["status"], answer["content"], answer["content_bytes"]) == ("empty", None, 0)


def test_business_subject_never_reads_a_user_of_the_same_id(live_server: LiveServer) -> None:
    tag = uuid.uuid4().hex[:8]
    user, business = context(tag, "user"), context(tag, "business")
    written = live_server.post("memory_write", {"agent_id": user["app_id"], "session_id": "s-write",
                                                "user_id": user["subject_id"], "items": [
                                                    {"kind": "constraint", "content": "私人约束：不坐红眼航班",
                                                     "scope": "user"}]})
    assert written.status_code == 200, written.text
    assert prepare(live_server, user, "航班有什么约束？", 8000)["status"] == "ready"
    assert prepare(live_server, business, "航班有什么约束？", 8000)["status"] == "empty"


def test_observed_prompt_is_recalled_by_a_later_run(live_server: LiveServer) -> None:
    tag = uuid.uuid4().hex[:8]
    ctx = context(tag)
    observe(live_server, ctx, "user_prompt", "记住：我对花生过敏，订餐时不要含花生。", f"e-{tag}", 0, f"run-a-{tag}")
    answer = prepare(live_server, ctx, "帮我订餐，有什么要注意的？", 2048)
    assert answer["status"] == "ready" and "花生" in answer["content"]


@pytest.mark.parametrize("request_body, field", [
    ({"event_id": "e1", "event": "telemetry", "payload": "x"}, "event"),
    ({"event_id": "", "event": "user_prompt", "payload": "x"}, "event_id"),
    ({"event_id": "e1", "event": "user_prompt", "payload": "x", "max_bytes": 100}, "max_bytes"),
    ({"event_id": "e1", "event": "user_prompt", "payload": "x", "max_bytes": 40000}, "max_bytes"),
])
def test_bad_events_are_refused_with_a_stable_code(live_server: LiveServer, request_body: dict[str, Any],
                                                   field: str) -> None:
    response = live_server.post("memory_observe", {"memory_context": context("bad"), "request": request_body})
    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "validation_error" and any(field in str(e) for e in body["errors"])


def test_bad_memory_context_is_refused(live_server: LiveServer) -> None:
    bad = {"app_id": "app 1", "subject_kind": "team", "subject_id": "u1"}
    response = live_server.post("memory_prepare", {"memory_context": bad, "request": {"query": "q"}})
    assert response.status_code == 422 and response.json()["code"] == "validation_error"


def test_an_oversized_payload_is_cut_to_max_bytes_at_a_character_boundary(live_server: LiveServer) -> None:
    tag = uuid.uuid4().hex[:8]
    ctx, run = context(tag), f"run-{tag}"
    text = "超长的工具输出🙂" * 600  # 14,400 UTF-8 bytes
    body = {"memory_context": ctx, "request": {"event_id": f"big-{tag}", "event": "user_prompt", "sequence": 0,
                                               "payload": {"text": text}, "metadata": {"run_id": run},
                                               "max_bytes": 512}}
    response = live_server.post("memory_observe", body)
    assert response.status_code == 200 and response.json()["recorded"] is True, response.text
    stored = session_turns(live_server, ctx, run)
    assert len(stored) == 1
    content = stored[0]["content"]
    assert 500 <= len(content.encode("utf-8")) <= 512 and text.startswith(content)


# -- issue 49: subjects apart by construction; a sequence the store cannot hold ------------------------------------

SUBJECT_PIECES = ["a", "b", ":", "business", "::", "business:", "-", "@"]


def subject_ids() -> list[str]:
    """Every id of up to three pieces that Dify may send (a letter or digit first, the pattern's characters)."""
    ids = {"".join(pieces) for pieces in itertools.product(SUBJECT_PIECES, repeat=3)}
    ids |= {"".join(pieces) for pieces in itertools.product(SUBJECT_PIECES, repeat=2)}
    return sorted(i for i in ids | set(SUBJECT_PIECES) if re.fullmatch(IDENTIFIER_PATTERN, i))


def test_no_two_subjects_share_a_memory_user() -> None:
    names: dict[str, tuple[str, str]] = {}
    for kind in ("user", "business"):
        for subject in subject_ids():
            name = user_of(MemoryContext(app_id="app", subject_kind=kind, subject_id=subject))
            assert re.fullmatch(IDENTIFIER_PATTERN, name), name  # a valid user_id for every node
            assert names.setdefault(name, (kind, subject)) == (kind, subject), name
    assert len(names) == 2 * len(subject_ids())
    assert user_of(MemoryContext(app_id="app", subject_kind="user", subject_id="alice")) == "alice"
    assert user_of(MemoryContext(app_id="app", subject_kind="business", subject_id="acme")) == "business:acme"


def test_a_user_named_like_a_business_reads_and_feeds_none_of_its_memory(client: FlaskClient) -> None:
    tag = uuid.uuid4().hex[:8]
    business = {"app_id": f"app-{tag}", "subject_kind": "business", "subject_id": f"acme-{tag}"}
    user = {**business, "subject_kind": "user", "subject_id": f"business:acme-{tag}"}

    def event(ctx: dict[str, str], text: str, run: str) -> None:
        body = {"event_id": f"e-{run}", "event": "user_prompt", "payload": text, "metadata": {"run_id": run}}
        response = post(client, "memory_observe", {"memory_context": ctx, "request": body})
        assert response.status_code == 200 and response.get_json()["recorded"], response.get_data(as_text=True)

    def recall(ctx: dict[str, str], query: str) -> dict[str, Any]:
        response = post(client, "memory_prepare", {"memory_context": ctx, "request": {"query": query}})
        assert response.status_code == 200, response.get_data(as_text=True)
        answer: dict[str, Any] = response.json
        return answer

    event(business, "记住：公司的报销上限是每月8000元。", f"run-b-{tag}")
    event(user, "记住：我对花生过敏，订餐时不要含花生。", f"run-u-{tag}")
    assert "8000" in recall(business, "报销上限是多少？")["content"]
    # Before: one memory user, business:acme-…, for both; the user read the business's limit and its own
    # allergy was served to the business.
    assert "8000" not in (recall(user, "报销上限是多少？")["content"] or "")
    assert "花生" in recall(user, "订餐要注意什么？")["content"]
    assert "花生" not in (recall(business, "订餐要注意什么？")["content"] or "")


@pytest.mark.parametrize("sequence", [2**63, 10**30])
def test_a_sequence_the_store_cannot_hold_is_refused_naming_the_field(client: FlaskClient, sequence: int) -> None:
    body = {"event_id": "e-big", "event": "user_prompt", "sequence": sequence, "payload": "x"}
    response = post(client, "memory_observe", {"memory_context": context("big"), "request": body})
    error = assert_error(response, 422, "validation_error")  # was 500 internal_error
    assert [e for e in error["errors"] if "request.sequence" in e], error["errors"]


def test_subjects_without_a_run_id_never_share_a_session(client: FlaskClient) -> None:
    """Sessions belong to the app, not to a user: one default name made every subject's events one session."""
    tag = uuid.uuid4().hex[:8]
    subjects = [{"app_id": f"app-{tag}", "subject_kind": "user", "subject_id": "alice"},
                {"app_id": f"app-{tag}", "subject_kind": "user", "subject_id": "bob"},
                {"app_id": f"app-{tag}", "subject_kind": "business", "subject_id": "alice"}]
    answers = []
    for ctx in subjects:
        # The same delivery id for each: before, the second and third were taken for redeliveries of the first.
        body = {"event_id": "evt-1", "event": "user_prompt", "payload": f"I am {ctx['subject_kind']} "
                                                                        f"{ctx['subject_id']}, PIN 4401."}
        response = post(client, "memory_observe", {"memory_context": ctx, "request": body})
        assert response.status_code == 200, response.get_data(as_text=True)
        answers.append(response.get_json())
    assert [(a["recorded"], a["turn"]) for a in answers] == [(True, 1)] * 3
    assert [a["session_id"] for a in answers] == [
        "dify-agent-run:alice", "dify-agent-run:bob", "dify-agent-run:business:alice"]
    for ctx, answer in zip(subjects, answers, strict=True):
        state = post(client, "session_state", {"agent_id": ctx["app_id"], "session_id": answer["session_id"]})
        assert [m["content"] for m in state.get_json()["buffer"]] == [
            f"I am {ctx['subject_kind']} {ctx['subject_id']}, PIN 4401."]
