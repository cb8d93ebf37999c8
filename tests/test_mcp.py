"""/mcp through the official MCP SDK's client over real HTTP on loopback, against `python server.py`.

One server (two tenants' keys) for the module; every test writes under a namespace of its own.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from acn.app.mcp_tools import TOOL_NODES, inline_refs, typed_unions, without_titles
from acn.app.openapi import SCHEMA_DIR
from acn.nodes import all_nodes
from acn.text.tokens import load_tokenizer
from tests.conftest import ROOT, free_port, server_env, serving, stop_process, wait_for_port

KEY_ALPHA = "mcp-test-key-alpha-0123456789"
KEY_BRAVO = "mcp-test-key-bravo-0123456789"
MAX_BODY_BYTES = 200_000
# What an agent's host reads before the first call: every tool with its schema, as the wire carries it.
TOOLS_LIST_MAX_TOKENS = 9_500  # 8,897 today (docs/integration.md states both)
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def base() -> Iterator[str]:
    with serving(ACN_API_KEYS=f"{KEY_ALPHA}:alpha,{KEY_BRAVO}:bravo",
                 ACN_MAX_BODY_BYTES=str(MAX_BODY_BYTES)) as url:
        yield url


@pytest.fixture()
def namespace() -> dict[str, str]:
    return {"agent_id": "mcp-agent", "session_id": f"s-{uuid.uuid4().hex[:12]}", "user_id": f"u-{uuid.uuid4().hex[:8]}"}


@asynccontextmanager
async def connect(base: str, key: str | None = KEY_ALPHA, modern: bool = False,
                  headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """Yield a ready client session: the initialize handshake, or with `modern` the 2026-07-28 discover probe."""
    sent = {"Authorization": f"Bearer {key}"} if key else {}
    sent.update(headers or {})
    async with httpx2.AsyncClient(headers=sent, timeout=60) as http, \
            streamable_http_client(f"{base}/mcp", http_client=http) as streams, \
            ClientSession(streams[0], streams[1]) as session:
        if modern:
            await session.discover()
        else:
            await session.initialize()
        yield session


def structured(result: types.CallToolResult) -> dict[str, Any]:
    assert isinstance(result.structured_content, dict)
    return result.structured_content


def text_of(result: types.CallToolResult) -> str:
    assert len(result.content) == 1 and isinstance(result.content[0], types.TextContent)
    return result.content[0].text


def raw_post(base: str, body: Any, headers: dict[str, str]) -> httpx2.Response:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    with httpx2.Client(timeout=60) as http:
        return http.post(f"{base}/mcp", content=data,
                         headers={"Content-Type": "application/json", "Accept": ACCEPT, **headers})


LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


# -- handshake and the list --------------------------------------------------------------------------------------


def test_initialize_lists_every_tool_with_the_request_models_schemas(base: str) -> None:
    async def main() -> tuple[types.InitializeResult, types.ListToolsResult]:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {KEY_ALPHA}"}, timeout=60) as http, \
                streamable_http_client(f"{base}/mcp", http_client=http) as streams, \
                ClientSession(streams[0], streams[1]) as session:
            return await session.initialize(), await session.list_tools()

    initialized, listed = asyncio.run(main())
    assert initialized.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
    assert initialized.server_info.name == "agent-context-nodes"
    assert initialized.capabilities.tools is not None
    nodes = all_nodes()
    assert [tool.name for tool in listed.tools] == list(TOOL_NODES)
    for tool in listed.tools:
        spec = nodes[tool.name]
        # The generated file itself, references written out and titles left out: never a second copy.
        generated = json.loads((SCHEMA_DIR / f"{tool.name}.request.json").read_text(encoding="utf-8"))
        expected = typed_unions(without_titles(inline_refs(generated, generated.get("$defs", {}))))
        if tool.name == "assemble":
            assert tool.input_schema["properties"].pop("full")["type"] == "boolean"
        assert tool.input_schema == expected
        assert tool.description == f"{spec.description.llm_en}\n{spec.description.llm_zh}"
        assert "$ref" not in json.dumps(tool.input_schema)
        # Dify reads each parameter's type from `type` alone: every property names one.
        assert [name for name, prop in tool.input_schema["properties"].items() if "type" not in prop] == []
    wire = listed.model_dump_json(by_alias=True, exclude_none=True)
    assert load_tokenizer().count(wire) <= TOOLS_LIST_MAX_TOKENS


def test_the_2026_protocol_without_a_handshake_serves_the_same_tools(base: str, namespace: dict[str, str]) -> None:
    async def main() -> tuple[str | None, list[str], types.CallToolResult]:
        async with connect(base, modern=True) as session:
            listed = await session.list_tools()
            called = await session.call_tool("session_state", namespace)
            return session.protocol_version, [tool.name for tool in listed.tools], called

    version, names, called = asyncio.run(main())
    assert version in MODERN_PROTOCOL_VERSIONS
    assert names == list(TOOL_NODES)
    assert not called.is_error
    assert structured(called)["version"] == 0


# -- a Chinese memory, found again; the other tenant sees nothing ------------------------------------------------


def test_a_chinese_memory_is_found_by_retrieve_and_assemble_and_not_by_another_tenant(
        base: str, namespace: dict[str, str]) -> None:
    fact = "我的会员卡号是 HZ-20240817，住在杭州西湖区"
    question = "我的会员卡号是多少？"

    async def main() -> dict[str, types.CallToolResult]:
        results: dict[str, types.CallToolResult] = {}
        async with connect(base) as session:
            results["write"] = await session.call_tool(
                "memory_write", {**namespace, "items": [{"content": fact, "kind": "identity", "key": "card"}]})
            results["retrieve"] = await session.call_tool("memory_retrieve", {**namespace, "query": question})
            results["assemble"] = await session.call_tool(
                "assemble", {**namespace, "user_input": question, "max_tokens": 300})
            results["full"] = await session.call_tool(
                "assemble", {**namespace, "user_input": question, "max_tokens": 300, "full": True})
        async with connect(base, key=KEY_BRAVO) as other:
            results["other_retrieve"] = await other.call_tool("memory_retrieve", {**namespace, "query": question})
            results["other_assemble"] = await other.call_tool(
                "assemble", {**namespace, "user_input": question, "max_tokens": 300})
        return results

    results = asyncio.run(main())
    assert not any(result.is_error for result in results.values())
    written = structured(results["write"])["results"]
    assert [(row["action"], row["content"]) for row in written] == [("added", fact)]

    retrieved = structured(results["retrieve"])
    assert [memory["content"] for memory in retrieved["memories"]] == [fact]
    assert fact in retrieved["text"] and text_of(results["retrieve"]) == retrieved["text"]

    small = structured(results["assemble"])
    assert set(small) == {"context", "mode", "tokens", "request_id"}
    assert fact in small["context"] and question in small["context"]
    assert text_of(results["assemble"]) == small["context"]
    assert small["tokens"] <= 300
    full = structured(results["full"])
    assert {"messages", "sources", "dropped", "prompt", "tokens"} <= set(full)
    assert full["prompt"] == small["context"] and text_of(results["full"]) == full["prompt"]

    assert structured(results["other_retrieve"])["memories"] == []
    assert fact not in structured(results["other_assemble"])["context"]


# -- refusals ------------------------------------------------------------------------------------------------------


def test_no_key_is_401_and_the_sdk_client_cannot_connect(base: str) -> None:
    response = raw_post(base, LIST, {})
    assert response.status_code == 401
    assert response.json()["code"] == "unauthorized"
    wrong = raw_post(base, LIST, {"Authorization": "Bearer not-a-key-of-this-server"})
    assert wrong.status_code == 401

    async def main() -> None:
        async with connect(base, key=None):
            pass

    with pytest.raises(Exception) as raised:  # an ExceptionGroup from the client's task group
        asyncio.run(main())
    assert "Server returned an error response" in repr(raised.value)


def test_a_foreign_origin_is_refused_and_the_servers_own_is_served(base: str) -> None:
    refused = raw_post(base, LIST, {"Authorization": f"Bearer {KEY_ALPHA}", "Origin": "http://attacker.example"})
    assert refused.status_code == 403
    assert refused.json()["code"] == "origin_not_allowed"
    rebound = raw_post(base, LIST, {"Authorization": f"Bearer {KEY_ALPHA}", "Host": "attacker.example"})
    assert rebound.status_code == 421

    async def main() -> int:
        async with connect(base, headers={"Origin": base}) as session:  # a page of this server's own origin
            return len((await session.list_tools()).tools)

    assert asyncio.run(main()) == len(TOOL_NODES)


def test_the_node_body_limits_hold(base: str) -> None:
    auth = {"Authorization": f"Bearer {KEY_ALPHA}"}
    too_large = raw_post(base, {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "x" * MAX_BODY_BYTES}},
                         auth)
    assert too_large.status_code == 413
    assert too_large.json()["code"] == "payload_too_large"
    duplicate = raw_post(base, b'{"jsonrpc": "2.0", "id": 1, "id": 2, "method": "tools/list"}', auth)
    assert duplicate.status_code == 422
    assert duplicate.json()["code"] == "duplicate_key"
    not_json = raw_post(base, b"{", auth)
    assert not_json.status_code == 400


# -- errors are results --------------------------------------------------------------------------------------------


def test_a_malformed_call_is_an_error_result_naming_the_field_and_the_session_goes_on(
        base: str, namespace: dict[str, str]) -> None:
    async def main() -> dict[str, types.CallToolResult | int]:
        async with connect(base) as session:
            return {
                "item": await session.call_tool("memory_write", {**namespace, "items": [{"contentx": 1}]}),
                "budget": await session.call_tool("assemble", {**namespace, "max_tokens": "many"}),
                "flag": await session.call_tool("assemble", {**namespace, "full": "yes"}),
                "hostile": await session.call_tool("memory_retrieve", {**namespace, "query": "x",
                                                                       "top_k": {"$gt": ""}, "__proto__": {}}),
                "nothing": await session.call_tool("memory_write", namespace),
                "unknown": await session.call_tool("drop_everything", {}),
                "after": len((await session.list_tools()).tools),
            }

    results = asyncio.run(main())
    for name in ("item", "budget", "flag", "hostile", "nothing", "unknown"):
        result = results[name]
        assert isinstance(result, types.CallToolResult) and result.is_error, name
        body = structured(result)
        assert set(body) == {"ok", "status", "code", "error", "errors", "request_id"}
        assert body["ok"] is False and body["request_id"]
        assert text_of(result).startswith(f"{body['code']}: ")
        assert "Traceback" not in text_of(result)
    item = structured(results["item"])  # type: ignore[arg-type]
    assert (item["status"], item["code"]) == (422, "validation_error")
    assert item["errors"] == ["items.0.content: Field required", "items.0.contentx: Extra inputs are not permitted"]
    assert structured(results["budget"])["errors"][0].startswith("max_tokens: ")  # type: ignore[arg-type]
    assert structured(results["flag"])["errors"] == ["full: Input should be a valid boolean"]  # type: ignore[arg-type]
    hostile = structured(results["hostile"])["errors"]  # type: ignore[arg-type]
    assert any(error.startswith("top_k: ") for error in hostile)
    assert any(error.startswith("__proto__: ") for error in hostile)
    assert structured(results["nothing"])["code"] == "validation_error"  # type: ignore[arg-type]
    assert (structured(results["unknown"])["status"], structured(results["unknown"])["code"]) == (  # type: ignore
        404, "unknown_node")
    assert results["after"] == len(TOOL_NODES)


# -- /metrics --------------------------------------------------------------------------------------------------------


def metric(base: str, line_start: str) -> float:
    with httpx2.Client(timeout=60) as http:
        text = http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {KEY_ALPHA}"}).text
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(line_start)]
    return values[0] if values else 0.0


def test_metrics_count_mcp_calls_by_tool_and_outcome(base: str, namespace: dict[str, str]) -> None:
    ok = 'acn_mcp_tool_calls_total{outcome="ok",tool="session_state"}'
    failed = 'acn_mcp_tool_calls_total{outcome="validation_error",tool="session_state"}'
    before = (metric(base, ok), metric(base, failed))

    async def main() -> None:
        async with connect(base) as session:
            await session.call_tool("session_state", namespace)
            await session.call_tool("session_state", {**namespace, "version": -1})

    asyncio.run(main())
    assert (metric(base, ok), metric(base, failed)) == (before[0] + 1, before[1] + 1)
    assert metric(base, 'acn_requests_total{route="/mcp",status="200"}') > 0


# -- the production server ---------------------------------------------------------------------------------------


def test_gunicorn_serves_mcp_on_the_same_port(tmp_path: Path, namespace: dict[str, str]) -> None:
    port = free_port()
    env = server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"), ACN_API_KEYS=f"{KEY_ALPHA}:alpha",
                     ACN_BIND=f"127.0.0.1:{port}", ACN_THREADS="2", ACN_LOG_LEVEL="WARNING")
    gunicorn = Path(sys.executable).parent / "gunicorn"
    process = subprocess.Popen([str(gunicorn), "-c", "deploy/gunicorn.conf.py"], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"

    async def main() -> tuple[list[str], types.CallToolResult]:
        async with connect(base) as session:
            names = [tool.name for tool in (await session.list_tools()).tools]
            return names, await session.call_tool("memory_retrieve", {**namespace, "query": "杭州"})

    try:
        wait_for_port(port, timeout=60, process=process)
        names, retrieved = asyncio.run(main())
        nodes_answer = httpx2.get(f"{base}/healthz", headers={"Authorization": f"Bearer {KEY_ALPHA}"}, timeout=60)
    finally:
        stop_process(process)
    assert names == list(TOOL_NODES)
    assert not retrieved.is_error and structured(retrieved)["memories"] == []
    assert nodes_answer.status_code == 200


# -- the schema rewrites, on their own ----------------------------------------------------------------------------


def test_the_schema_rewrites_keep_what_validates_and_leave_data_alone() -> None:
    schema = {"title": "R", "type": "object", "$defs": {"Inner": {"title": "Inner", "type": "object",
                                                                 "properties": {"title": {"type": "string"}}}},
              "properties": {"inner": {"anyOf": [{"$ref": "#/$defs/Inner"}, {"type": "null"}], "default": None},
                             "mode": {"enum": ["title", "x"], "default": {"title": "kept"}, "type": "string"}}}
    rewritten = typed_unions(without_titles(inline_refs(schema, schema["$defs"])))
    assert rewritten == {"type": "object", "properties": {
        "inner": {"anyOf": [{"type": "object", "properties": {"title": {"type": "string"}}}, {"type": "null"}],
                  "default": None, "type": ["object", "null"]},
        "mode": {"enum": ["title", "x"], "default": {"title": "kept"}, "type": "string"}}}
    looped = {"$defs": {"Node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/Node"}}}},
              "$ref": "#/$defs/Node"}
    with pytest.raises(ValueError, match="recursive"):
        inline_refs(looped, looped["$defs"])


def test_a_started_server_builds_the_tools_before_it_says_ready(fresh_app: Any) -> None:
    """`python server.py` and gunicorn's worker start prepare the tools on a thread: /readyz names mcp_tools until
    they are built, so the first /mcp call does not pay the SDK's import (issue 47: a first call costs what a second
    does)."""
    endpoint = fresh_app.extensions["acn_mcp"]
    assert endpoint.pending() == []  # built lazily when nothing prepared it
    endpoint.prepare_in_background()
    preparing = endpoint._preparing
    assert preparing is not None
    preparing.join(60)
    assert endpoint.pending() == [] and endpoint._toolbox is not None
    ready = fresh_app.test_client().get("/readyz").get_json()
    assert "mcp_tools" not in ready["pending"]
