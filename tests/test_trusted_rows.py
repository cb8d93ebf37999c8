"""Stored rows outside what later arithmetic can hold (issue 35): refused at import, skipped and reported on read.

A row with a stamp of 2^63 − 1 used to import fine; then the session's clock (newest stamp + 1) overflowed the store
on every record_turn and memory_write (503 for good), and the /ui pages 500'd turning it into a date. The import
now refuses it (422 naming the row and field); a row stored so anyway (planted here through the repository, as an
older server or another tool could have written it) is skipped by the readers and named in `dropped`.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.common.models import Memory
from acn.common.stored import MAX_STORED_VERSION, STAMP_WINDOW_MS
from tests.conftest import assert_error, post

NS = {"agent_id": "agent-rows", "session_id": "session-rows"}
INT64_MAX = 2**63 - 1


def row(**fields: Any) -> dict[str, Any]:
    now = int(time.time() * 1000)
    base = {"id": "mem_trusted_1", "kind": "fact", "content": "the deploy window is Friday night", "key": "deploy",
            "importance": 5, "scope": "session", **NS, "created_at": now, "updated_at": now, "version": 1}
    return {**base, **fields}


@pytest.mark.parametrize(("field", "value"), [
    ("updated_at", INT64_MAX), ("created_at", INT64_MAX), ("valid_to", INT64_MAX),
    ("updated_at", int(time.time() * 1000) + STAMP_WINDOW_MS + 86_400_000),
    ("version", MAX_STORED_VERSION + 1),
])
def test_an_import_refuses_what_later_arithmetic_cannot_hold(fresh_app: Flask, field: str, value: int) -> None:
    client = fresh_app.test_client()
    good = row(id="mem_trusted_ok")
    body = assert_error(client.post("/v1/memories/import", json={"memories": [good, row(**{field: value})]}),
                        422, "validation_error")
    assert body["errors"] == [f"memories[1].{field}: " + body["errors"][0].split(": ", 1)[1]]
    assert "mem_trusted_1" in body["error"]
    # Nothing of the refused import was stored, the good row neither.
    assert client.get("/v1/memories/mem_trusted_ok").status_code == 404


def plant(app: Flask, **fields: Any) -> Memory:
    """Store a row as an older server (or another tool) could have: through the repository, past the import."""
    memory = Memory.model_validate(row(**fields))
    app.extensions["acn"].memories.save("default", [memory], new_ids={memory.id})
    return memory


def test_a_stored_row_beyond_the_bounds_never_breaks_the_session(fresh_app: Flask) -> None:
    client: FlaskClient = fresh_app.test_client()
    bad = plant(fresh_app, updated_at=INT64_MAX, created_at=INT64_MAX)

    turn = post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": "we moved the deploy"}]})
    assert turn.status_code == 200, turn.get_json()
    write = post(client, "memory_write", {**NS, "items": [{"kind": "fact", "key": "deploy",
                                                           "content": "the deploy window is Monday morning"}]})
    assert write.status_code == 200, write.get_json()

    found = post(client, "memory_retrieve", {**NS, "query": "deploy window Friday", "top_k": 10}).get_json()
    assert found["ok"] and found["dropped"] == [bad.id]
    assert bad.id not in [m["id"] for m in found["memories"]]

    assembled = post(client, "assemble", {**NS, "user_input": "when is the deploy window Friday?",
                                          "mode": "focused", "max_tokens": 3000}).get_json()
    assert assembled["ok"]
    dropped = [d for d in assembled["dropped"] if d["id"] == bad.id]
    assert dropped and dropped[0]["reason"].startswith("stored row cannot be read: created_at must be")
    assert bad.id not in [s["id"] for s in assembled["sources"]]

    assert client.get(f"/ui/agents/{NS['agent_id']}/sessions/{NS['session_id']}").status_code == 200
    assert client.get("/ui/").status_code == 200
    metrics = client.get("/metrics").get_data(as_text=True)
    assert "acn_stored_rows_skipped_total 1.0" in metrics
