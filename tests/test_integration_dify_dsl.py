"""The Dify DSL examples, loaded and executed by Dify's own workflow engine (graphon 0.8.0, Python 3.12)
against the real server; code nodes run through graphon's sandbox client against a loopback stand-in."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import ROOT
from tests.integration_support import LiveServer, run_py312

pytest_plugins = ("tests.integration_fixtures",)

EXAMPLES = ROOT / "examples" / "dify"
COMPACT = EXAMPLES / "compact_conversation.yml"
CHATFLOW = EXAMPLES / "memory_chatflow.yml"


def run_dsl(path: Path, inputs: dict[str, Any], server: LiveServer, sandbox: str, *extra: str,
            key: str | None = None) -> dict[str, Any]:
    env = {"ACN_BASE_URL": server.base_url, "ACN_API_KEY": key or server.api_key}
    return run_py312("run_dsl.py", str(path), "--inputs", json.dumps(inputs, ensure_ascii=False),
                     "--env", json.dumps(env), "--sandbox", sandbox, *extra)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yml")), ids=lambda p: p.name)
def test_every_example_is_loadable_by_graphon(path: Path) -> None:
    report = run_py312("run_dsl.py", str(path), "--inspect-only")
    assert report["load_status"] == "loadable", report["load_reason"]
    if "llm" in report["node_types"]:
        assert report["validated_nodes"], "LLM nodes are validated against graphon's LLMNodeData"


def conversation_text() -> str:
    lines = []
    for i in range(1, 7):
        lines += [f"User: 第{i}单的订单号是 ORD-2025031{i}-88{i}{i}，金额 {i}99.00 元",
                  f"Assistant: 收到，订单 ORD-2025031{i}-88{i}{i} 已登记。"]
    return "\n".join(lines + ["用户：超时改成30秒", "客服：好的，已改为30秒。"])


def test_compact_workflow_runs_end_to_end(live_server: LiveServer, sandbox: str) -> None:
    report = run_dsl(COMPACT, {"conversation": conversation_text(), "keep_recent": 1}, live_server, sandbox)
    assert report["status"] == "succeeded", report
    outputs = report["node_outputs"]["__graph__"]
    assert report["node_outputs"]["call_compact"]["status_code"] == 200
    for i in range(1, 7):
        assert f"ORD-2025031{i}-88{i}{i}" in outputs["working_summary"]
        assert f"{i}99.00" in outputs["working_summary"]
    recent = json.loads(outputs["recent_messages_json"])
    assert [m["content"] for m in recent] == ["超时改成30秒", "好的，已改为30秒。"]
    assert outputs["tokens_after"] < outputs["tokens_before"] and outputs["segments"] >= 1


def test_compact_workflow_accepts_a_json_message_list(live_server: LiveServer, sandbox: str) -> None:
    messages = [{"role": "user", "content": f"批次 B-{i} 数量 {i * 3}"} if i % 2 else
                {"role": "assistant", "content": f"已记录 B-{i - 1}"} for i in range(1, 13)]
    report = run_dsl(COMPACT, {"conversation": json.dumps(messages, ensure_ascii=False)}, live_server, sandbox)
    assert report["status"] == "succeeded", report
    assert report["node_outputs"]["parse_conversation"]["message_count"] == 12
    outputs = report["node_outputs"]["__graph__"]
    # Six turns, the last two kept verbatim (keep_recent defaults to 2 in the workflow).
    assert all(f"B-{i}" in outputs["working_summary"] for i in (1, 3, 5, 7))
    assert "B-11" in outputs["recent_messages_json"] and "B-11" not in outputs["working_summary"]


def test_compact_workflow_fails_with_the_servers_message(live_server: LiveServer, sandbox: str) -> None:
    report = run_dsl(COMPACT, {"conversation": "User: hi\nAssistant: hello"}, live_server, sandbox,
                     key="not-a-key")
    assert report["status"] == "failed"
    assert "HTTP 401" in report["error"] and "invalid API key" in report["error"]


def test_memory_chatflow_remembers_across_turns(live_server: LiveServer, sandbox: str) -> None:
    conversation = str(uuid.uuid4())
    turns = ["我是VIP客户，我的订单号是 ORD-20250317-8821，请帮我查物流", "另外，超时改成30秒", "我的订单号是多少？"]
    reports = []
    for query in turns:
        inputs = {"query": query, "conversation_id": conversation, "user_id": "end user 42"}
        report = run_dsl(CHATFLOW, inputs, live_server, sandbox, "--llm-stand-in", "llm")
        assert report["status"] == "succeeded", report
        reports.append(report["node_outputs"])
    versions = [json.loads(r["record_turn"]["body"])["version"] for r in reports]
    assert versions == [1, 2, 3]
    last = reports[-1]["read_context"]
    # What the LLM receives on turn 3: the system prompt, the memory of turn 1 and the earlier turns.
    assert last["system_text"].startswith("你是一家电商平台的客服助手")
    assert "ORD-20250317-8821" in last["memory_text"] and "ORD-20250317-8821" in last["system_text"]
    assert last["user_prompt"].endswith("我的订单号是多少？") and "超时改成30秒" in last["user_prompt"]
    assert reports[-1]["answer"]["answer"] == "好的，已收到：我的订单号是多少？"
    # A user id Dify passes through from an API caller ("end user 42") is mapped to a valid identifier.
    namespace = reports[0]["build_requests"]["namespace"]
    assert namespace["session_id"] == conversation and namespace["user_id"].startswith("u-")


def test_plugin_chatflow_uses_the_plugins_declared_parameters_and_outputs() -> None:
    """Tool nodes name real tools, bind only declared parameters, and read only declared typed outputs."""
    import re

    import yaml

    from acn.integrations.generate import AUTHOR, PLUGIN_DIR, PLUGIN_NAME

    document = yaml.safe_load((EXAMPLES / "memory_chatflow_plugin.yml").read_text(encoding="utf-8"))
    nodes = {node["id"]: node["data"] for node in document["workflow"]["graph"]["nodes"]}
    tools = {node_id: data for node_id, data in nodes.items() if data["type"] == "tool"}
    assert set(t["tool_name"] for t in tools.values()) == {"assemble", "record_turn"}
    outputs = {}
    for node_id, data in tools.items():
        assert data["plugin_id"] == f"{AUTHOR}/{PLUGIN_NAME}"
        assert data["provider_id"] == f"{AUTHOR}/{PLUGIN_NAME}/{PLUGIN_NAME}"
        declared = yaml.safe_load((PLUGIN_DIR / "tools" / f"{data['tool_name']}.yaml").read_text(encoding="utf-8"))
        forms = {p["name"]: p for p in declared["parameters"]}
        assert all(forms[name]["form"] == "llm" for name in data["tool_parameters"]), node_id
        assert all(forms[name]["form"] == "form" for name in data["tool_configurations"]), node_id
        required = {name for name, p in forms.items() if p["required"] and p["form"] == "llm"}
        assert required <= set(data["tool_parameters"]), node_id
        outputs[node_id] = set(declared["output_schema"]["properties"]) | {"text", "json", "files"}
    references = re.findall(r"\{\{#([a-zA-Z0-9_]+)\.([a-zA-Z0-9_]+)#\}\}", json.dumps(document))
    used = [(node, var) for node, var in references if node in tools]
    assert used and all(var in outputs[node] for node, var in used), used
