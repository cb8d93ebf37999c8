"""The Dify plugin: the daemon's packaging rules, and dify_plugin 0.10.2 loading the built package and
invoking every tool, through PluginExecutor, against the real server on loopback."""

from __future__ import annotations

import json
import re
import uuid
import zipfile
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from acn.common.pack import VERSION as PACK_VERSION
from acn.integrations.generate import EXTERNAL_MEMORY_TOOLS, PLUGIN_DIR, TOOL_NODES, dify_plugin_files
from acn.integrations.package_dify import build
from acn.nodes import all_nodes
from tests.integration_support import LiveServer, run_py312

pytest_plugins = ("tests.integration_fixtures",)

# dify-plugin-daemon's rules (pkg/entities/plugin_entities, manifest_entities), stricter than the SDK's models.
VERSION = re.compile(r"^\d{1,4}(\.\d{1,4}){2}(-\w{1,16})?$")
AUTHOR = re.compile(r"^[a-z0-9_-]{1,64}$")
NAME = re.compile(r"^[a-z0-9_-]{1,128}$")
TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]+$")
DAEMON_TAGS = {"search", "image", "videos", "weather", "finance", "design", "travel", "social", "news", "medical",
               "productivity", "education", "business", "entertainment", "utilities", "agent", "rag", "other",
               "trigger"}


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_manifest_and_declarations_follow_the_daemon_rules() -> None:
    manifest = load(PLUGIN_DIR / "manifest.yaml")
    assert VERSION.match(manifest["version"]) and VERSION.match(manifest["meta"]["version"])
    assert AUTHOR.match(manifest["author"]) and NAME.match(manifest["name"])
    assert manifest["type"] == "plugin"
    assert datetime.fromisoformat(manifest["created_at"].replace("Z", "+00:00")).tzinfo is not None
    assert set(manifest["tags"]) <= DAEMON_TAGS
    assert set(manifest["meta"]["arch"]) <= {"amd64", "arm64"}
    assert manifest["meta"]["runner"] == {"language": "python", "version": "3.12", "entrypoint": "main"}
    assert all(len(manifest["label"][lang]) < 1024 for lang in manifest["label"])
    # The daemon keeps one tool provider and one endpoint group per plugin: more would silently vanish.
    assert len(manifest["plugins"]["tools"]) == 1 and len(manifest["plugins"].get("endpoints", [])) <= 1
    assert all(len(path) <= 128 for paths in manifest["plugins"].values() for path in paths)
    assert (PLUGIN_DIR / manifest["privacy"]).is_file()
    provider = load(PLUGIN_DIR / manifest["plugins"]["tools"][0])
    icons = {manifest["icon"], provider["identity"]["icon"]}
    assert all((PLUGIN_DIR / "_assets" / icon).is_file() for icon in icons), "icons must live in _assets/"
    assert provider["identity"]["author"] == manifest["author"]
    assert (PLUGIN_DIR / provider["extra"]["python"]["source"]).is_file()
    assert set(provider["credentials_for_provider"]) == {"base_url", "api_key"}
    assert provider["credentials_for_provider"]["api_key"]["type"] == "secret-input"
    expected = [name for name in all_nodes() if name in TOOL_NODES]
    assert provider["tools"] == [f"tools/{name}.yaml" for name in [*expected, *EXTERNAL_MEMORY_TOOLS]]
    assert set(expected) == set(TOOL_NODES), "every context node must be a Dify tool"
    for path in provider["tools"]:
        tool = load(PLUGIN_DIR / path)
        if tool["identity"]["name"] in EXTERNAL_MEMORY_TOOLS:
            check_external_memory_tool(tool)
        else:
            check_tool(tool)


def check_external_memory_tool(tool: dict[str, Any]) -> None:
    """Dify's external-memory contract: two object parameters the runtime fills, one JSON message back."""
    assert [p["name"] for p in tool["parameters"]] == ["memory_context", "request"]
    # An object parameter reaches the plugin as the object; a `string` one would arrive as the dict's repr.
    assert all(p["type"] == "object" and p["required"] for p in tool["parameters"])
    assert tool["identity"]["label"]["en_US"] and tool["identity"]["label"]["zh_Hans"]
    assert (PLUGIN_DIR / tool["extra"]["python"]["source"]).is_file()
    assert "output_schema" not in tool  # the answer is the JSON message, not workflow variables


def check_tool(tool: dict[str, Any]) -> None:
    name = tool["identity"]["name"]
    assert TOOL_NAME.match(name)
    assert tool["identity"]["label"]["en_US"] and tool["identity"]["label"]["zh_Hans"]
    assert tool["description"]["human"]["en_US"] and tool["description"]["human"]["zh_Hans"]
    assert tool["description"]["llm"]
    assert (PLUGIN_DIR / tool["extra"]["python"]["source"]).is_file()
    for parameter in tool["parameters"]:
        assert parameter["label"]["en_US"] and parameter["label"]["zh_Hans"], parameter["name"]
        assert parameter["human_description"]["en_US"], parameter["name"]
        assert parameter["form"] in ("llm", "form")
        # Objects and lists travel as JSON strings: `object`/`array`/`any` parameters render blank in Dify's UI.
        assert parameter["type"] in ("string", "number", "boolean", "select"), parameter
    outputs = tool["output_schema"]["properties"]
    assert outputs and all("type" in spec for spec in outputs.values())


def test_plugin_directory_holds_exactly_the_generated_tools() -> None:
    generated = {p for p in dify_plugin_files(all_nodes()) if p.parent.name == "tools"}
    on_disk = set((PLUGIN_DIR / "tools").glob("*.y*ml")) | set((PLUGIN_DIR / "tools").glob("*.py"))
    assert on_disk == generated, "regenerate with `python -m acn.app.generate`"


def test_package_holds_the_plugin_with_manifest_at_the_root(tmp_path: Path) -> None:
    package = build(tmp_path / "plugin.difypkg")
    with zipfile.ZipFile(package) as archive:
        names = archive.namelist()
    assert "manifest.yaml" in names and "_assets/icon.svg" in names and "main.py" in names
    assert all("\\" not in n and "__pycache__" not in n and not n.endswith(".pyc") for n in names)
    tools = [*TOOL_NODES, *EXTERNAL_MEMORY_TOOLS]
    assert {f"tools/{t}.py" for t in tools} | {f"tools/{t}.yaml" for t in tools} <= set(names)


def scenario(ns: dict[str, str]) -> list[dict[str, Any]]:
    """One conversation through all six tools, with parameters as Dify sends them (objects as JSON text)."""
    turn = [{"role": "user", "content": "我是VIP客户，我的订单号是 ORD-20250317-8821，请帮我查一下物流"},
            {"role": "assistant", "content": "好的，正在查询订单 ORD-20250317-8821 的物流信息。"}]
    chatter = [{"role": "user", "content": "谢谢"}, {"role": "assistant", "content": "不客气"},
               {"role": "user", "content": "超时改成30秒"}, {"role": "assistant", "content": "已把超时改成30秒。"}]
    long_talk = []
    for i in range(1, 11):
        long_talk += [{"role": "user", "content": f"第{i}步：把批次 B-{100 + i} 的数量设为 {i * 7} 件"},
                      {"role": "assistant", "content": f"已记录批次 B-{100 + i}，数量 {i * 7} 件。"}]
    return [
        *external_memory_steps(ns),
        {"tool": "record_turn", "parameters": {**ns, "messages": json.dumps(turn, ensure_ascii=False)}},
        {"tool": "memory_write", "parameters": {**ns, "items": json.dumps(
            [{"kind": "preference", "content": "用户希望回答简短，只给结论", "key": "answer_style"}],
            ensure_ascii=False)}},
        {"tool": "memory_retrieve", "parameters": {**ns, "query": "我之前说过希望回答怎样？", "top_k": 3.0,
                                                   "user_id": None, "language": ""}},
        {"tool": "assemble", "parameters": {**ns, "user_input": "我的订单号是多少？",
                                            "system_prompt": "你是电商客服助手。", "max_tokens": 2000}},
        {"tool": "edit_context", "parameters": {"messages": json.dumps(chatter, ensure_ascii=False),
                                                "rules": '{"drop_pleasantries": true}', "protect_last": 0}},
        {"tool": "compact", "parameters": {"agent_id": ns["agent_id"], "session_id": ns["session_id"] + "-c",
                                           "messages": json.dumps(long_talk, ensure_ascii=False),
                                           "force": True, "persist": False, "keep_recent": 2}},
    ]


def external_memory_steps(ns: dict[str, str]) -> list[dict[str, Any]]:
    """Agent V2 external memory as Dify's runtime calls it: objects for memory_context and request."""
    context = {"app_id": ns["agent_id"] + "-v2", "subject_kind": "user", "subject_id": "u-42"}
    prompt = "请记住：我只喝无糖饮料🥤，出差预算每晚不超过 600 元🏨"
    observe = {"event_id": "evt-1", "event": "user_prompt", "sequence": 0, "payload": {"text": prompt},
               "metadata": {"run_id": ns["session_id"] + "-run"}, "max_bytes": 8192}
    query = {"query": "我喝什么饮料？预算多少？"}
    return [
        {"tool": "memory_observe", "parameters": {"memory_context": context, "request": observe}},
        {"tool": "memory_observe", "parameters": {"memory_context": context, "request": observe}},  # redelivery
        {"tool": "memory_prepare", "parameters": {"memory_context": context,
                                                  "request": {**query, "max_bytes": 512}}},
        # A JSON string of the objects is accepted too.
        {"tool": "memory_prepare", "parameters": {"memory_context": json.dumps(context),
                                                  "request": json.dumps({**query, "max_bytes": 32768})}},
        {"tool": "memory_prepare", "parameters": {"memory_context": {**context, "subject_id": "nobody"},
                                                  "request": {**query, "max_bytes": 512}}},
        {"tool": "memory_prepare", "parameters": {"memory_context": {**context, "subject_kind": "team"},
                                                  "request": {**query, "max_bytes": 512}}},
    ]


@pytest.fixture(scope="module")
def sdk_report(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Build the .difypkg, unpack it, and let dify_plugin load it and invoke every tool (one subprocess)."""
    work = tmp_path_factory.mktemp("difypkg")
    with zipfile.ZipFile(build(work / "plugin.difypkg")) as archive:
        archive.extractall(work / "unpacked")
    tag = uuid.uuid4().hex[:8]
    ns = {"agent_id": f"dify-app-{tag}", "session_id": f"conv-{tag}"}
    plan = work / "plan.json"
    plan.write_text(json.dumps(scenario(ns), ensure_ascii=False), encoding="utf-8")
    return run_py312("check_dify_plugin.py", str(work / "unpacked"), "--base-url", live_server.base_url,
                     "--api-key", live_server.api_key, "--plan", str(plan))


def test_sdk_loads_the_package(sdk_report: dict[str, Any]) -> None:
    assert sdk_report["plugin"] == {"name": "agent_context_nodes", "author": "agent-context-nodes",
                                    "version": PACK_VERSION}
    assert sdk_report["providers"] == ["agent_context_nodes"]
    assert sorted(sdk_report["tools"]) == sorted([*TOOL_NODES, *EXTERNAL_MEMORY_TOOLS]) == \
        sdk_report["registered_tools"]
    for tool in sdk_report["tools"].values():
        assert set(tool["labels"]) >= {"en_US", "zh_Hans"}


def test_credentials_are_checked_against_the_server(sdk_report: dict[str, Any]) -> None:
    checks = sdk_report["credentials"]
    assert checks["good"] == "ok"
    assert "ToolProviderCredentialValidationError" in checks["bad_key"] and "invalid API key" in checks["bad_key"]
    assert "base_url must start with http" in checks["bad_url"]


def test_every_tool_returns_its_declared_typed_outputs(sdk_report: dict[str, Any]) -> None:
    invoked = {step["tool"]: step for step in sdk_report["invocations"] if step["tool"] in TOOL_NODES}
    assert sorted(invoked) == sorted(TOOL_NODES)
    for name, step in invoked.items():
        assert step["error"] == "", f"{name}: {step['error']}"
        assert step["missing_outputs"] == [] and step["undeclared_outputs"] == [], name
        assert step["schema_errors"] == [], f"{name}: {step['schema_errors']}"
        assert len(step["json"]) == 1 and step["json"][0]["ok"] is True and len(step["text"]) == 1


def test_external_memory_answers_one_contract_json_message(sdk_report: dict[str, Any]) -> None:
    steps = [step for step in sdk_report["invocations"] if step["tool"] in EXTERNAL_MEMORY_TOOLS]
    observed, redelivered, small, large, empty, bad = steps
    for step in (observed, redelivered):
        assert step["error"] == "" and step["json"] == [{"status": "accepted"}]
        assert step["variables"] == {} and step["text"] == []
    for step, max_bytes in ((small, 512), (large, 32768)):
        assert step["error"] == "" and len(step["json"]) == 1 and step["variables"] == {} and step["text"] == []
        answer = step["json"][0]
        assert set(answer) == {"status", "content", "content_bytes"} and answer["status"] == "ready"
        assert answer["content_bytes"] == len(answer["content"].encode("utf-8")) <= max_bytes
        assert "🥤" in answer["content"] and "600" in answer["content"]
    assert empty["json"] == [{"status": "empty", "content": None, "content_bytes": 0}]
    # A provider error: the tool fails (Dify disables the callback for the run) with the server's reason.
    assert bad["json"] == [] and "validation_error" in bad["error"] and "subject_kind" in bad["error"]


def test_tool_outputs_carry_the_conversation(sdk_report: dict[str, Any]) -> None:
    out = {step["tool"]: step["variables"] for step in sdk_report["invocations"] if step["tool"] in TOOL_NODES}
    assert out["record_turn"]["version"] >= 1 and out["record_turn"]["turn"] == 1
    assert out["memory_write"]["results"][0]["action"] == "added"
    # The retrieved block is the tool node's built-in `text` output (the text message), not a variable of that
    # name: daemons before 0.3.0 refuse an output schema naming `text` (dify#16150), newer ones shadow it.
    texts = {step["tool"]: step["text"] for step in sdk_report["invocations"] if step["tool"] in TOOL_NODES}
    assert "回答简短" in texts["memory_retrieve"][0] and out["memory_retrieve"]["triggered"] is True
    assert not {"text", "files", "json"} & set(out["memory_retrieve"])
    for schema in sdk_report["output_schemas"].values():
        assert not {"text", "files", "json"} & set(schema.get("properties", {}))
    assemble = out["assemble"]
    assert "ORD-20250317-8821" in assemble["prompt"]
    assert "你是电商客服助手" in assemble["system_text"]
    assert assemble["tokens"]["total"] <= 2000
    assert json.loads(assemble["messages_json"]) == assemble["messages"]
    assert assemble["messages"][-1] == {**assemble["messages"][-1], "role": "user", "content": "我的订单号是多少？"}
    edited = [m["content"] for m in out["edit_context"]["messages"]]
    assert "谢谢" not in edited and "超时改成30秒" in edited
    compact = out["compact"]
    assert compact["compacted"] is True and compact["stats"]["tokens_after"] < compact["stats"]["tokens_before"]
    assert len(json.loads(compact["recent_messages_json"])) == 4
    assert all(f"B-{100 + i}" in json.dumps(compact, ensure_ascii=False) for i in range(1, 11))
