"""Generate the Dify tool plugin's declarations from the node models (the agent strategy's: strategy_files.py; Coze's:
coze_files.py).

`python -m acn.app.generate` writes these along with schemas/ (see `integration_files`), and the schema
staleness test fails when they drift from the models, so a new node field reaches Dify and Coze the same day.
Only the words people read (labels in two languages) are written by hand, in the tables below.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from acn.common.pack import PACK
from acn.nodes.spec import NodeSpec

ROOT = Path(__file__).resolve().parents[2]  # the checkout: dist/ goes there
# The Dify and Coze packages are projects of their own beside the product (integrations/, outside the `acn` import
# root and the wheel); these modules write their generated files and build the Dify packages.
INTEGRATIONS = ROOT / "integrations"
PLUGIN_DIR = INTEGRATIONS / "dify_plugin"
# The agent strategy is a plugin of its own: the daemon refuses a plugin declaring both tools and agent strategies
# ("agent_strategy and tool, model, endpoint, trigger, or datasource cannot be provided at the same time",
# dify-plugin-daemon pkg/entities/plugin_entities/plugin_declaration.go).
STRATEGY_DIR = INTEGRATIONS / "dify_strategy"
STRATEGY_PLUGIN = "agent_that_remembers"
STRATEGY_NAME = "agent_that_remembers"
COZE_DIR = INTEGRATIONS / "coze"
# The daemon wants lowercase [a-z0-9_-] for author and name; these match PACK.
AUTHOR = PACK["author"]
PLUGIN_NAME = PACK["name"]
# A fixed timestamp keeps the generated manifest byte-stable; bump it with the version.
CREATED_AT = "2026-01-01T00:00:00Z"

# The context nodes a builder drops into a workflow; session administration stays on the HTTP API.
TOOL_NODES = ("edit_context", "compact", "memory_write", "memory_retrieve", "assemble", "record_turn")
TOOL_LABELS = {
    "edit_context": ("Edit Context", "编辑上下文"),
    "compact": ("Compact", "压缩上下文"),
    "memory_write": ("Memory Write", "写入记忆"),
    "memory_retrieve": ("Memory Retrieve", "检索记忆"),
    "assemble": ("Assemble Context", "组装上下文"),
    "record_turn": ("Record Turn", "记录本轮对话"),
}
# Dify Agent V2 external-memory callbacks (acn/nodes/external_memory.py): tools of the same provider whose
# parameters and single JSON answer follow Dify's contract, not the generated node shape.
EXTERNAL_MEMORY_TOOLS = {
    "memory_prepare": ("External Memory: Prepare", "外部记忆：召回",
                       {"query": {"type": "string"}, "max_bytes": {"type": "integer", "minimum": 512,
                                                                 "maximum": 32768}}),
    "memory_observe": ("External Memory: Observe", "外部记忆：记录",
                       {"event_id": {"type": "string"},
                        "event": {"type": "string", "enum": ["user_prompt", "model_response", "tool_call",
                                                             "tool_result", "run_end"]},
                        "sequence": {"type": "integer"}, "payload": {}, "metadata": {"type": "object"},
                        "max_bytes": {"type": "integer", "minimum": 512, "maximum": 32768}}),
}
MEMORY_CONTEXT_SCHEMA = {"type": "object", "required": ["app_id", "subject_kind", "subject_id"],
                         "properties": {"app_id": {"type": "string"},
                                        "subject_kind": {"type": "string", "enum": ["user", "business"]},
                                        "subject_id": {"type": "string"}}}
# Secrets and optimistic-concurrency knobs are not tool parameters: the server's settings cover them; the caller
# engine's replies are an exchange between a program and the server (the agent strategy), not a tool input.
HIDDEN_PARAMETERS = {"llm", "expected_version", "half_life_hours", "llm_replies"}
# Wired to workflow variables (or filled by an agent's LLM); everything else is node configuration.
LLM_FORM = {"agent_id", "session_id", "user_id", "messages", "query", "user_input", "system_prompt", "items",
            "working_summary", "memories", "knowledge", "key"}
PARAMETER_LABELS = {
    "agent_id": ("Agent ID", "智能体 ID"),
    "session_id": ("Session ID", "会话 ID"),
    "user_id": ("User ID", "用户 ID"),
    "messages": ("Messages (JSON)", "消息列表（JSON）"),
    "rules": ("Edit rules (JSON)", "编辑规则（JSON）"),
    "protect_last": ("Protected last turns", "保护最近轮数"),
    "context_window": ("Context window", "上下文窗口"),
    "trigger_ratio": ("Trigger ratio", "触发比例"),
    "segment_size": ("Turns per segment", "每段轮数"),
    "keep_recent": ("Recent turns kept", "保留最近轮数"),
    "max_segments": ("Max segments", "最多段数"),
    "wait_for_segment": ("Wait for a whole segment", "等满一段再压缩"),
    "engine": ("Engine", "压缩引擎"),
    "force": ("Force", "强制压缩"),
    "persist": ("Persist", "保存结果"),
    "items": ("Items (JSON)", "记忆条目（JSON）"),
    "extract": ("Extract events", "抽取事件"),
    "dedupe_threshold": ("Dedupe threshold", "去重阈值"),
    "redact_pii": ("Redact personal data", "脱敏个人信息"),
    "user_memory": ("User memory rule", "用户长期记忆规则"),
    "query": ("Query", "查询"),
    "kinds": ("Kinds (JSON)", "记忆类型（JSON）"),
    "scopes": ("Scopes (JSON)", "作用域（JSON）"),
    "top_k": ("Top K", "返回条数"),
    "max_item_tokens": ("Max tokens per memory", "每条记忆最多 token"),
    "min_score": ("Min score", "最低分"),
    "trigger": ("Trigger", "触发方式"),
    "key": ("Key", "键"),
    "include_superseded": ("Include superseded", "包含已取代"),
    "language": ("Language", "语言"),
    "max_tokens": ("Max tokens", "最大 token 数"),
    "system_prompt": ("System prompt", "系统提示词"),
    "user_input": ("User input", "用户输入"),
    "working_summary": ("Working summary", "工作摘要"),
    "memories": ("Memories (JSON)", "记忆（JSON）"),
    "knowledge": ("Knowledge (JSON)", "知识（JSON）"),
    "mode": ("Mode", "组装模式"),
    "budget": ("Budget ratios (JSON)", "预算比例（JSON）"),
    "phase": ("Phase", "阶段"),
    "archive_top_k": ("Archived turns top K", "原话检索条数"),
    "probes": ("Amnesia probes", "遗忘探针"),
    "edit": ("Edit buffer", "编辑缓冲区"),
    "compact": ("Compact when triggered", "触发时压缩"),
    "compaction": ("Compaction options (JSON)", "压缩选项（JSON）"),
}
# Outputs that are message lists also come as one JSON string, ready for the next node's `messages` input.
JSON_TWINS = ("messages", "recent_messages")
# Every Dify tool node has the built-in outputs text, files and json; an output_schema property of the same name
# is refused by plugin daemons before 0.3.0 (Dify < 1.9: "Field validation for 'OutputSchema' failed on the
# 'json_schema' tag", dify#16150) and would shadow the built-in one after. memory_retrieve's `text` reaches the
# workflow as the built-in `text` output (integrations/dify_plugin/acn_client.py sends it as the text message).
RESERVED_OUTPUTS = frozenset({"text", "files", "json"})
# compact's `prompt` (engine caller) is for a program driving the exchange (the agent strategy), which reads the
# JSON; as a workflow variable it would be an object that is null on every other answer.
EXCHANGE_OUTPUTS = {"compact": frozenset({"prompt"})}
# The oldest Dify release claimed: its plugin daemon (0.3.0) is the first whose output-schema rules were read
# from source and found to accept these declarations; older ones are not claimed (not checked against the SDK).
MINIMUM_DIFY_VERSION = "1.9.0"


def tool_nodes(nodes: dict[str, NodeSpec]) -> list[NodeSpec]:
    """Return the nodes that become Dify tools, in manifest order."""
    return [spec for name, spec in nodes.items() if name in TOOL_NODES]


# -- Dify plugin -----------------------------------------------------------------------------


def dify_plugin_files(nodes: dict[str, NodeSpec]) -> dict[Path, str]:
    """Return the plugin manifest, provider and one YAML + one class per tool."""
    specs = tool_nodes(nodes)
    files = {PLUGIN_DIR / "manifest.yaml": to_yaml(plugin_manifest()),
             PLUGIN_DIR / "provider" / f"{PLUGIN_NAME}.yaml": to_yaml(provider_declaration(specs))}
    for spec in specs:
        files[PLUGIN_DIR / "tools" / f"{spec.name}.yaml"] = to_yaml(tool_declaration(spec))
        files[PLUGIN_DIR / "tools" / f"{spec.name}.py"] = tool_source(spec)
    for name in EXTERNAL_MEMORY_TOOLS:
        spec = nodes[name]
        files[PLUGIN_DIR / "tools" / f"{name}.yaml"] = to_yaml(external_memory_declaration(spec))
        files[PLUGIN_DIR / "tools" / f"{name}.py"] = tool_source(spec, call="invoke_external_memory")
    return files


def plugin_manifest() -> dict[str, Any]:
    """Return the plugin manifest.yaml (fields per dify-plugin-daemon's PluginDeclaration)."""
    return {
        "version": PACK["version"],
        "type": "plugin",
        "author": AUTHOR,
        "name": PLUGIN_NAME,
        "label": PACK["label"],
        "description": PACK["description"],
        "icon": "icon.svg",
        "resource": {"memory": 268435456, "permission": {"tool": {"enabled": True}}},
        "plugins": {"tools": [f"provider/{PLUGIN_NAME}.yaml"]},
        "meta": {"version": "0.0.1", "arch": ["amd64", "arm64"],
                 "runner": {"language": "python", "version": "3.12", "entrypoint": "main"},
                 "minimum_dify_version": MINIMUM_DIFY_VERSION},
        "created_at": CREATED_AT,
        "privacy": "PRIVACY.md",
        "tags": ["agent", "productivity", "utilities"],
        "verified": False,
    }


def provider_declaration(specs: list[NodeSpec]) -> dict[str, Any]:
    """Return the one tool provider: identity, server credentials, the tool list."""
    return {
        "identity": {"author": AUTHOR, "name": PLUGIN_NAME, "label": PACK["label"],
                     "description": PACK["description"], "icon": "icon.svg",
                     "tags": ["productivity", "utilities"]},
        "credentials_for_provider": {
            "base_url": {
                "type": "text-input", "required": True,
                "label": {"en_US": "Server base URL", "zh_Hans": "服务地址"},
                "placeholder": {"en_US": "http://agent-context-nodes:8000"},
                "help": {"en_US": "Where the Agent Context Nodes server listens, as seen from the plugin daemon.",
                         "zh_Hans": "插件守护进程访问 Agent Context Nodes 服务的地址。"},
            },
            "api_key": {
                "type": "secret-input", "required": False,
                "label": {"en_US": "API key", "zh_Hans": "API 密钥"},
                "placeholder": {"en_US": "One of the keys in the server's ACN_API_KEYS"},
                "help": {"en_US": "Sent as 'Authorization: Bearer <key>'; leave empty if the server has no keys.",
                         "zh_Hans": "以 'Authorization: Bearer <key>' 发送；服务未配置密钥时留空。"},
            },
        },
        "tools": [f"tools/{spec.name}.yaml" for spec in specs] + [f"tools/{name}.yaml"
                                                                   for name in EXTERNAL_MEMORY_TOOLS],
        "extra": {"python": {"source": f"provider/{PLUGIN_NAME}.py"}},
    }


def tool_declaration(spec: NodeSpec) -> dict[str, Any]:
    """Return one tool's YAML: labels, descriptions, parameters from the request model, typed outputs."""
    label_en, label_zh = TOOL_LABELS[spec.name]
    return {
        "identity": {"name": spec.name, "author": AUTHOR, "label": {"en_US": label_en, "zh_Hans": label_zh}},
        "description": {"human": {"en_US": spec.description.human_en, "zh_Hans": spec.description.human_zh},
                        "llm": spec.description.llm_en},
        "parameters": tool_parameters(spec),
        "output_schema": output_schema(spec),
        "extra": {"python": {"source": f"tools/{spec.name}.py"}},
    }


def external_memory_declaration(spec: NodeSpec) -> dict[str, Any]:
    """Return an external-memory callback's YAML: `memory_context` and `request` objects, as Dify's runtime
    passes them (object parameters: a `string` one would reach the plugin as the dict's repr)."""
    label_en, label_zh, request_properties = EXTERNAL_MEMORY_TOOLS[spec.name]
    def parameter(name: str, en: str, zh: str, schema: dict[str, Any], help_en: str) -> dict[str, Any]:
        return {"name": name, "type": "object", "required": True, "form": "llm",
                "label": {"en_US": en, "zh_Hans": zh}, "human_description": {"en_US": help_en},
                "llm_description": help_en, "input_schema": schema}
    return {
        "identity": {"name": spec.name, "author": AUTHOR, "label": {"en_US": label_en, "zh_Hans": label_zh}},
        "description": {"human": {"en_US": spec.description.human_en, "zh_Hans": spec.description.human_zh},
                        "llm": spec.description.llm_en},
        "parameters": [
            parameter("memory_context", "Memory context", "记忆上下文", MEMORY_CONTEXT_SCHEMA,
                      "Filled in by Dify's Agent V2 runtime: app_id, subject_kind (user|business), subject_id."),
            parameter("request", "Request", "请求", {"type": "object", "properties": request_properties},
                      "Filled in by Dify's Agent V2 runtime (the callback's request)."),
        ],
        "extra": {"python": {"source": f"tools/{spec.name}.py"}},
    }


def tool_parameters(spec: NodeSpec) -> list[dict[str, Any]]:
    """Return Dify parameters for the request model's top-level fields (objects and lists as JSON strings)."""
    schema = spec.request_model.model_json_schema(mode="validation")
    required = set(schema.get("required", []))
    parameters = []
    for name, prop in schema["properties"].items():
        if name in HIDDEN_PARAMETERS:
            continue
        if name not in PARAMETER_LABELS:
            raise KeyError(f"acn/integrations/generate.py: add labels for {spec.name}.{name} to PARAMETER_LABELS")
        parameters.append(tool_parameter(name, prop, name in required, schema.get("$defs", {})))
    return parameters


def tool_parameter(name: str, prop: dict[str, Any], required: bool, defs: dict[str, Any]) -> dict[str, Any]:
    """Return one Dify ToolParameter for a JSON-schema property."""
    label_en, label_zh = PARAMETER_LABELS[name]
    inner = _non_null(prop, defs)
    description = prop.get("description") or inner.get("description") or label_en
    parameter: dict[str, Any] = {"name": name, "type": "string", "required": required,
                                 "form": "llm" if name in LLM_FORM else "form",
                                 "label": {"en_US": label_en, "zh_Hans": label_zh},
                                 "human_description": {"en_US": description}, "llm_description": description}
    kind = inner.get("type")
    if "enum" in inner:
        parameter["type"] = "select"
        parameter["options"] = [{"value": v, "label": {"en_US": str(v)}} for v in inner["enum"]]
    elif kind in ("integer", "number"):
        parameter["type"] = "number"
        if kind == "number":
            parameter["precision"] = 2
        if "minimum" in inner:
            parameter["min"] = inner["minimum"]
        if "maximum" in inner:
            parameter["max"] = inner["maximum"]
    elif kind == "boolean":
        parameter["type"] = "boolean"
    elif kind in ("array", "object"):
        parameter["llm_description"] = f"{description} Pass a JSON string."
    if prop.get("default") is not None and not isinstance(prop["default"], (list, dict)):
        parameter["default"] = prop["default"]
    return parameter


def output_schema(spec: NodeSpec) -> dict[str, Any]:
    """Return the output_schema whose properties become typed workflow variables of the tool node."""
    schema = spec.response_model.model_json_schema(mode="serialization")
    defs = schema.get("$defs", {})
    properties: dict[str, Any] = {}
    for name, prop in schema["properties"].items():
        if name == "ok" or name in RESERVED_OUTPUTS or name in EXCHANGE_OUTPUTS.get(spec.name, ()):
            continue
        inner = _non_null(prop, defs)
        kind = inner.get("type", "object")
        entry: dict[str, Any] = {"type": kind}
        if kind == "array":
            item = _non_null(inner.get("items", {}), defs)
            entry["items"] = {"type": item.get("type", "object")}
        if prop.get("description") or inner.get("description"):
            entry["description"] = prop.get("description") or inner.get("description")
        properties[name] = entry
        if name in JSON_TWINS:
            properties[f"{name}_json"] = {"type": "string", "description": f"`{name}` as one JSON string."}
    return {"type": "object", "properties": properties}


def _non_null(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """Return the schema without its null branch, with a top-level $ref resolved."""
    if "anyOf" in prop:
        rest = [p for p in prop["anyOf"] if p.get("type") != "null"]
        prop = rest[0] if len(rest) == 1 else {"type": "string"}
    if "$ref" in prop:
        found: dict[str, Any] = defs[prop["$ref"].split("/")[-1]]
        return found
    return prop


def tool_source(spec: NodeSpec, call: str = "invoke_node") -> str:
    """Return the tool's Python class: one Tool subclass per file, as the SDK's loader requires."""
    class_name = "".join(part.title() for part in spec.name.split("_")) + "Tool"
    return f'''"""Dify tool {spec.name}: POST /v1/nodes/{spec.name} on the Agent Context Nodes server (generated)."""

from collections.abc import Generator
from typing import Any

from dify_plugin import Tool
from dify_plugin.entities.tool import ToolInvokeMessage

from acn_client import {call}


class {class_name}(Tool):
    def _invoke(self, tool_parameters: dict[str, Any]) -> Generator[ToolInvokeMessage, None, None]:
        yield from {call}(self, "{spec.name}", tool_parameters)
'''


def to_yaml(data: Any) -> str:
    """Return data as the YAML every generated declaration is written in (key order kept, byte-stable)."""
    text: str = yaml.safe_dump(data, allow_unicode=True, sort_keys=False, width=110)
    return text
