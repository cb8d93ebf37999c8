"""The Dify API-based extension endpoint on the real server, called exactly as Dify's
APIBasedExtensionRequestor calls it (POST {point, params}, Bearer key, JSON; non-200 is an error)."""

from __future__ import annotations

import uuid
from typing import Any

import requests

from tests.integration_support import LiveServer

pytest_plugins = ("tests.integration_fixtures",)


def call(server: LiveServer, point: str, params: dict[str, Any] | None = None,
         key: str | None = None) -> requests.Response:
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key or server.api_key}"}
    return requests.request("POST", f"{server.base_url}/v1/dify/extension", headers=headers, timeout=(5, 60),
                            json={"point": point, "params": params or {}})


def test_ping_answers_pong(live_server: LiveServer) -> None:
    response = call(live_server, "ping")
    assert response.status_code == 200 and response.json() == {"result": "pong"}


def test_external_data_query_injects_memories_of_the_app(live_server: LiveServer) -> None:
    app_id = str(uuid.uuid4())
    base = {"agent_id": app_id, "session_id": "conv-7"}
    for scope, content, extra in [("agent", "本店七天无理由退货，运费由买家承担", {}),
                                  ("session", "这位顾客的订单号是 ORD-77", {}),
                                  ("user", "顾客偏好顺丰快递", {"user_id": "buyer-9"})]:
        written = live_server.post("memory_write", {**base, **extra, "items": [
            {"kind": "fact", "content": content, "scope": scope}]})
        assert written.status_code == 200, written.text
    params = {"app_id": app_id, "tool_variable": "memory", "inputs": {}, "query": "退货运费谁出？订单号？快递？"}
    plain = call(live_server, "app.external_data_tool.query", params)
    assert plain.status_code == 200
    assert "七天无理由退货" in plain.json()["result"]
    assert "ORD-77" not in plain.json()["result"] and "顺丰" not in plain.json()["result"]
    scoped = call(live_server, "app.external_data_tool.query",
                  {**params, "inputs": {"session_id": "conv-7", "user_id": "buyer-9"}})
    result = scoped.json()["result"]
    assert "七天无理由退货" in result and "ORD-77" in result and "顺丰" in result
    assert all(line.startswith("[来自记忆") for line in result.splitlines())
    empty = call(live_server, "app.external_data_tool.query", {**params, "query": ""})
    assert empty.json() == {"result": ""}


def test_errors_are_non_200_with_the_canonical_body(live_server: LiveServer) -> None:
    assert call(live_server, "ping", key="wrong").status_code == 401
    unsupported = call(live_server, "app.moderation.input", {"app_id": "a", "inputs": {}, "query": "x"})
    assert unsupported.status_code == 400 and "not supported" in unsupported.json()["error"]
    malformed = requests.post(f"{live_server.base_url}/v1/dify/extension", data="[]", timeout=10,
                              headers={"Authorization": f"Bearer {live_server.api_key}",
                                       "Content-Type": "application/json"})
    assert malformed.status_code == 400 and malformed.json()["ok"] is False
