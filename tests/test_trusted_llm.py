"""What the LLM compaction engine answers is data (issue 35): checked, bounded, and a failure falls back.

The operator's LLM endpoint is a real loopback stand-in. 50,000 nested brackets (RecursionError), NaN in the
reply, a reply dripped one byte at a time: compact(engine=llm) answers with the extractive engine and says why.
A number where a fact string was expected ("facts": [62938471]) is a fact: kept as text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from acn.server import create_app
from tests.compaction_conversations import ZH_FINANCE_TURNS, conversation
from tests.conftest import make_settings, post
from tests.stand_in_http import Drip, StandIn, stand_in

MESSAGES = [m.model_dump(exclude_none=True) for m in conversation(ZH_FINANCE_TURNS[:8])]
NS = {"agent_id": "agent-llm", "session_id": "session-llm"}


def completion(content: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]},
                      ensure_ascii=False).encode()


SUMMARY = {"goal": "把12万转到对公账户", "constraints": [], "done": [], "todo": [], "decisions": [],
           "key_numbers": {"金额": "12万"}}
BAD_REPLIES: dict[str, Any] = {
    "50,000 nested brackets": b"[" * 50_000 + b"]" * 50_000,
    "nested brackets in the content": completion("[" * 50_000 + "]" * 50_000),
    "NaN in the content": completion(json.dumps({**SUMMARY, "facts": [float("nan")]})),
    "a 400-digit number in the content": completion(json.dumps({**SUMMARY, "facts": [10**400]})),
    "a valid reply dripped": Drip(completion(json.dumps({**SUMMARY, "facts": []})), 0.05),
}


@contextmanager
def llm_app(tmp_path: Path, reply: Any) -> Iterator[tuple[Flask, StandIn]]:
    with stand_in(lambda path, headers, body: (200, reply, {})) as server:
        app = create_app(make_settings(tmp_path, llm_base_url=server.url + "/v1", llm_model="m", llm_retries=0,
                                       llm_timeout_seconds=1.0, provider_backoff_seconds=0))
        try:
            yield app, server
        finally:
            app.extensions["acn"].close()


def compact(app: Flask) -> dict[str, Any]:
    response = post(app.test_client(), "compact", {**NS, "messages": MESSAGES[:12], "force": True,
                                                   "keep_recent": 0, "engine": "llm"})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


@pytest.mark.parametrize("reply", list(BAD_REPLIES), ids=list(BAD_REPLIES))
def test_a_malformed_or_dripping_llm_reply_falls_back_to_extractive(tmp_path: Path, reply: str) -> None:
    with llm_app(tmp_path, BAD_REPLIES[reply]) as (app, server):
        body = compact(app)
        assert server.requests  # the LLM was asked
        assert all(sent < total for sent, total in server.dripped)  # a drip is cut at the deadline
    assert body["engine_used"] == "extractive"
    assert body["fallback_reason"].startswith(("LLM failed", "LLM timed out"))
    assert "62938471" in str(body["segments"][0]["key_numbers"]) or "62938471" in body["working_summary"]


def test_a_number_among_the_facts_is_a_fact(tmp_path: Path) -> None:
    with llm_app(tmp_path, completion(json.dumps({**SUMMARY, "facts": [62938471, " 45秒 "]}))) as (app, _):
        body = compact(app)
    assert body["engine_used"] == "llm" and body["fallback_reason"] is None
    assert body["segments"][0]["facts"] == ["62938471", "45秒"]
