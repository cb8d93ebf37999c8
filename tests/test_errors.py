"""Every failure is the one JSON envelope with a stable code, and none changes stored data."""

from __future__ import annotations

import re
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from tests.conftest import assert_error, make_settings, post

INJECTIONS = ['a" or agent_id != "', "a' or 1==1", 'x") or (true', "a b", "", "-leading", "a" * 129,
              "中文名", "a\\b", "a\nb"]


def stored(client: FlaskClient, ns: dict[str, str]) -> list[dict[str, Any]]:
    return client.get("/v1/memories", query_string={"agent_id": ns["agent_id"]}).get_json()["memories"]


@pytest.fixture()
def seeded(client: FlaskClient, ns: dict[str, str]) -> dict[str, str]:
    response = post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": "订单号 ORD-1"}]})
    assert response.status_code == 200
    return ns


def test_malformed_json_is_400(client: FlaskClient, seeded: dict[str, str]) -> None:
    response = client.post("/v1/nodes/memory_write", data='{"agent_id": ', content_type="application/json")
    assert_error(response, 400, "bad_request")
    assert len(stored(client, seeded)) == 1


def test_invalid_utf8_is_400(client: FlaskClient) -> None:
    response = client.post("/v1/nodes/memory_write", data=b'{"agent_id": "\xff\xfe"}', content_type="application/json")
    assert "UTF-8" in assert_error(response, 400)["error"]


def test_non_object_body_is_400(client: FlaskClient) -> None:
    assert_error(client.post("/v1/nodes/memory_write", json=[1, 2]), 400)


def test_deeply_nested_json_is_400(client: FlaskClient) -> None:
    body = '{"agent_id": "a", "session_id": "s", "items": ' + "[" * 5000 + "]" * 5000 + "}"
    assert_error(client.post("/v1/nodes/memory_write", data=body, content_type="application/json"), 400)


def test_wrong_content_type_is_415(client: FlaskClient) -> None:
    response = client.post("/v1/nodes/memory_write", data="agent_id=a", content_type="application/x-www-form-urlencoded")
    assert_error(response, 415, "unsupported_media_type")


def test_unknown_node_is_404(client: FlaskClient) -> None:
    body = assert_error(post(client, "no_such_node", {}), 404, "unknown_node")
    assert "memory_write" in body["error"]


def test_wrong_method_is_405(client: FlaskClient) -> None:
    assert_error(client.get("/v1/nodes/memory_write"), 405, "method_not_allowed")


def test_unknown_route_is_404_json(client: FlaskClient) -> None:
    assert_error(client.get("/nope"), 404, "not_found")


def test_validation_lists_each_field_path(client: FlaskClient, ns: dict[str, str]) -> None:
    body = assert_error(post(client, "memory_write", {**ns, "items": [{"kind": "bogus", "content": "x"}],
                                                      "dedupe_threshold": 7, "surprise": 1}), 422, "validation_error")
    joined = " ".join(body["errors"])
    assert "items.0.kind" in joined and "dedupe_threshold" in joined and "surprise" in joined
    assert len(body["errors"]) == 3


@pytest.mark.parametrize("bad", INJECTIONS)
def test_identifiers_outside_the_alphabet_are_422(client: FlaskClient, seeded: dict[str, str], bad: str) -> None:
    for node, extra in (("memory_write", {"items": [{"kind": "fact", "content": "x"}]}),
                        ("memory_retrieve", {"query": "订单"})):
        assert_error(post(client, node, {"agent_id": bad, "session_id": "s", **extra}), 422)
        assert_error(post(client, node, {"agent_id": seeded["agent_id"], "session_id": bad, **extra}), 422)
    assert_error(client.get("/v1/memories", query_string={"agent_id": bad}), 422)
    assert_error(client.delete("/v1/memories", query_string={"agent_id": bad}), 422)
    assert len(stored(client, seeded)) == 1


def test_body_over_the_limit_is_413_and_stores_nothing(tmp_path: Any, ns: dict[str, str]) -> None:
    from acn.server import create_app

    app: Flask = create_app(make_settings(tmp_path, max_body_bytes=2000))
    try:
        client = app.test_client()
        big = {**ns, "items": [{"kind": "fact", "content": "长" * 1500}]}
        assert_error(post(client, "memory_write", big), 413, "payload_too_large")
        assert stored(client, ns) == []
    finally:
        app.extensions["acn"].close()


def test_request_id_is_echoed_or_generated(client: FlaskClient) -> None:
    response = client.get("/healthz", headers={"X-Request-Id": "req-123"})
    assert response.get_json()["request_id"] == "req-123" and response.headers["X-Request-Id"] == "req-123"
    generated = client.get("/healthz", headers={"X-Request-Id": "bad id with spaces"})
    assert generated.get_json()["request_id"] not in ("", "bad id with spaces")


def test_every_answer_carries_the_server_time(client: FlaskClient, ns: dict[str, str]) -> None:
    answers = [post(client, "memory_retrieve", {**ns, "query": "x"}), post(client, "memory_retrieve", {"query": 1}),
               client.get("/healthz")]
    for response in answers:
        timing = response.headers["Server-Timing"]
        assert re.fullmatch(r"app;dur=\d+\.\d{2}", timing), timing
        assert 0 < float(timing.split("=")[1]) < 60_000
    assert [r.status_code for r in answers] == [200, 422, 200]


def test_success_envelope(client: FlaskClient, ns: dict[str, str]) -> None:
    body = post(client, "memory_retrieve", {**ns, "query": "x"}).get_json()
    assert body["ok"] is True and body["request_id"]


@pytest.mark.parametrize("max_tokens", [-5, 0, 15, 2_000_001, 10**30, "many", None])
def test_nonsense_budgets_are_422(client: FlaskClient, ns: dict[str, str], max_tokens: Any) -> None:
    body = assert_error(post(client, "assemble", {**ns, "user_input": "你好", "max_tokens": max_tokens}), 422)
    assert any(e.startswith("max_tokens") for e in body["errors"])


def test_huge_strings_and_lists_are_422_and_store_nothing(client: FlaskClient, seeded: dict[str, str]) -> None:
    huge_list = [{"kind": "fact", "content": f"事实 {i}"} for i in range(501)]
    assert_error(post(client, "memory_write", {**seeded, "items": huge_list}), 422)
    assert_error(post(client, "assemble", {**seeded, "user_input": "问" * 200_001}), 422)
    assert_error(post(client, "record_turn", {**seeded, "messages": [{"role": "user", "content": "x"}] * 501}), 422)
    assert_error(post(client, "memory_write", {**seeded, "items": [{"kind": "fact", "content": "x",
                                                                     "meta": {"n": 2**70}}]}), 422)
    assert_error(post(client, "record_turn", {**seeded, "messages": [{"role": "user", "content": "x",
                                                                       "meta": {"n": float("inf")}}]}), 400)
    assert len(stored(client, seeded)) == 1
    assert post(client, "session_state", seeded).get_json()["version"] == 0


def test_lone_surrogates_are_400(client: FlaskClient, ns: dict[str, str]) -> None:
    body = '{"agent_id": "a", "session_id": "s", "items": [{"kind": "fact", "content": "bad \\ud800 half"}]}'
    assert_error(client.post("/v1/nodes/memory_write", data=body, content_type="application/json"), 400)


def test_unknown_memory_id_shapes_are_404(client: FlaskClient) -> None:
    for bad in ('x" or 1==1', "a b", "%22"):
        assert_error(client.get(f"/v1/memories/{bad}"), 404)
        assert_error(client.delete(f"/v1/memories/{bad}"), 404)


def test_turn_numbers_cannot_run_past_the_limit(client: FlaskClient, ns: dict[str, str]) -> None:
    # The limit is out of a client's reach: a number ahead of the session is refused (tests/test_tenants_bounds.py).
    first = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "x", "turn": 10**9}]})
    assert_error(first, 422, "turn_ahead")
    assert post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "y"}]}).get_json()["turn"] == 1
    assert post(client, "session_rollback", {**ns, "version": 1}).status_code == 200  # every version reads back


# The error contract every client relies on, as it stood before errors lost their HTTP statuses: each stable code
# and the status it is answered with. A new error class must be added here (and so be chosen on purpose).
CONTRACT = {
    "internal_error": 500, "bad_request": 400, "unauthorized": 401, "forbidden": 403, "csrf_token_invalid": 403,
    "origin_not_allowed": 403, "not_found": 404, "unknown_node": 404, "version_conflict": 409, "lease_lost": 409,
    "payload_too_large": 413, "unsupported_media_type": 415, "host_not_allowed": 421,
    "validation_error": 422, "duplicate_key": 422, "too_much_work": 422, "invalid_configuration": 500,
    "store_not_configured": 500, "provider_error": 502, "retry_later": 503, "store_unavailable": 503,
    "coordination_unavailable": 503, "store_behind": 503, "session_busy": 503, "busy": 503, "llm_busy": 503, "provider_timeout": 504,
    "llm_url_not_allowed": 403, "llm_override_not_allowed": 403, "encryption_key_error": 500,
    "sealed_field_filter": 500, "turn_ahead": 422, "too_many_requests": 429, "sign_in_throttled": 429, "tenant_busy": 429,
}


def _pack_errors() -> list[type]:
    import importlib
    import pkgutil

    import acn
    from acn.common.errors import PackError

    for module in pkgutil.walk_packages(acn.__path__, "acn."):
        importlib.import_module(module.name)
    found, todo = [], [PackError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return [cls for cls in found if cls.__module__.startswith("acn.")]


def test_every_error_code_keeps_its_status_and_only_the_edge_knows_it() -> None:
    """Errors below the app layer carry a code and no status; acn/app/statuses.py maps each to the contract."""
    from acn.app.statuses import http_status, retry_after

    errors = _pack_errors()
    assert len(errors) >= len(CONTRACT)
    with_status = [cls.__qualname__ for cls in errors if any("status" in vars(c) for c in cls.__mro__[:-1])]
    assert with_status == []
    answered = {cls.code: http_status(cls("x")) for cls in errors}
    assert answered == CONTRACT
    assert {code for cls in errors if retry_after(cls("x")) for code in [cls.code]} == {
        code for code, status in CONTRACT.items() if status in (429, 503)}


def test_a_node_without_a_store_is_the_wiring_s_fault_not_the_request_s() -> None:
    from acn.app.statuses import http_status
    from acn.common.errors import StoreNotConfiguredError
    from acn.common.settings import Settings
    from acn.services.deps import Deps
    from acn.text.tokens import load_tokenizer

    deps = Deps(settings=Settings(), tokenizer=load_tokenizer())
    with pytest.raises(StoreNotConfiguredError) as refused:
        deps.memories  # noqa: B018 - the property is what raises
    assert refused.value.code == "store_not_configured" and http_status(refused.value) == 500
