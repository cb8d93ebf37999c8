"""Generate the Dify agent strategy plugin's declarations (integrations/dify_strategy/).

The strategy is a plugin of its own: the daemon refuses a plugin declaring both tools and agent strategies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from acn.integrations.generate import AUTHOR, STRATEGY_DIR, STRATEGY_NAME, STRATEGY_PLUGIN, plugin_manifest, to_yaml

# What the strategy's package takes from the tool plugin's folder, the one source of each.
SHARED_FILES = ("acn_client.py", "PRIVACY.md", "requirements.txt", "_assets/icon.svg")


def dify_strategy_files() -> dict[Path, str]:
    """Return the strategy plugin's declarations. The files it shares with the tool plugin (SHARED_FILES: the
    client, privacy note, requirements, icon) have one source, integrations/dify_plugin/, and join the strategy's
    package when it is built (acn/integrations/package_dify.py)."""
    return {STRATEGY_DIR / "manifest.yaml": to_yaml(strategy_manifest()),
            STRATEGY_DIR / "provider" / f"{STRATEGY_PLUGIN}.yaml": to_yaml(strategy_provider()),
            STRATEGY_DIR / "strategies" / f"{STRATEGY_NAME}.yaml": to_yaml(strategy_declaration())}


STRATEGY_LABEL = {"en_US": "Agent that remembers", "zh_Hans": "会记忆的 Agent"}
STRATEGY_DESCRIPTION = {
    "en_US": "A function-calling agent whose every model call is assembled under a token budget by Agent Context "
             "Nodes (identity, memory, working state, recent turns, input) instead of the raw history; every "
             "turn is stored and compacted on your server.",
    "zh_Hans": "函数调用型 Agent：每次调用模型前由 Agent Context Nodes 在 token 预算内组装上下文"
               "（身份、记忆、工作状态、最近轮次、输入），而不是原始历史；每轮对话都保存并在你的服务上压缩。",
}


def strategy_manifest() -> dict[str, Any]:
    """Return the strategy plugin's manifest: agent_strategies only, model.llm and tool permissions."""
    manifest = plugin_manifest()
    manifest.update({
        "name": STRATEGY_PLUGIN, "label": STRATEGY_LABEL, "description": STRATEGY_DESCRIPTION,
        "resource": {"memory": 268435456, "permission": {"tool": {"enabled": True},
                                                         "model": {"enabled": True, "llm": True}}},
        "plugins": {"agent_strategies": [f"provider/{STRATEGY_PLUGIN}.yaml"]},
        "tags": ["agent"],
    })
    return manifest


def strategy_provider() -> dict[str, Any]:
    return {"identity": {"author": AUTHOR, "name": STRATEGY_PLUGIN, "label": STRATEGY_LABEL,
                         "description": STRATEGY_DESCRIPTION, "icon": "icon.svg"},
            "strategies": [f"strategies/{STRATEGY_NAME}.yaml"],
            "extra": {"python": {"source": f"provider/{STRATEGY_PLUGIN}.py"}}}


def _param(name: str, kind: str, en: str, zh: str, *, required: bool = False, help_en: str = "",
           help_zh: str = "", **extra: Any) -> dict[str, Any]:
    parameter: dict[str, Any] = {"name": name, "type": kind, "required": required,
                                 "label": {"en_US": en, "zh_Hans": zh}}
    if help_en:
        parameter["help"] = {"en_US": help_en, "zh_Hans": help_zh or help_en}
    parameter.update(extra)
    return parameter


def strategy_declaration() -> dict[str, Any]:
    """Return the strategy YAML: Dify's usual agent parameters (as cot_agent's FunctionCalling declares them),
    then the server and the memory scope, budget, assembly mode and compaction model. No `history-messages`
    feature: the history comes from the server's session, assembled under the budget."""
    modes = ["auto", "snapshot", "focused", "streaming"]
    return {
        "identity": {"name": STRATEGY_NAME, "author": AUTHOR, "label": STRATEGY_LABEL},
        "description": STRATEGY_DESCRIPTION,
        "parameters": [
            _param("model", "model-selector", "Model", "模型", required=True, scope="tool-call&llm"),
            _param("tools", "array[tools]", "Tool list", "工具列表"),
            _param("instruction", "string", "Instruction", "指令", required=True,
                   auto_generate={"type": "prompt_instruction"}, template={"enabled": True}),
            _param("query", "string", "Query", "查询", required=True),
            _param("maximum_iterations", "number", "Maximum Iterations", "最大迭代次数", required=True,
                   default=5, min=1, max=50),
            _param("base_url", "string", "Server base URL", "服务地址", required=True,
                   help_en="Where the Agent Context Nodes server listens, as seen from the plugin daemon.",
                   help_zh="插件守护进程访问 Agent Context Nodes 服务的地址。"),
            _param("api_key", "secret-input", "API key", "API 密钥",
                   help_en="One of the server's ACN_API_KEYS; empty if the server has none.",
                   help_zh="服务 ACN_API_KEYS 中的一个；服务未配置密钥时留空。"),
            _param("max_tokens", "number", "Context budget (tokens)", "上下文预算（token）", min=64,
                   help_en="Most tokens the assembled context may take per model call; default: half the model's "
                           "context window.",
                   help_zh="每次调用模型时组装上下文的最大 token 数；默认取模型窗口的一半。"),
            _param("assembly_mode", "select", "Assembly mode", "组装模式", default="auto",
                   options=[{"value": m, "label": {"en_US": m}} for m in modes],
                   help_en="auto picks snapshot or focused; focused retrieves memories and archived turns for the "
                           "query.", help_zh="auto 自动选择 snapshot 或 focused；focused 按提问检索记忆与归档原话。"),
            _param("compaction_model", "select", "Compaction model", "压缩模型", default="server",
                   options=[{"value": m, "label": {"en_US": m}} for m in ("server", "agent_model")],
                   help_en="server compacts on the server (offline extractive unless its operator configured an "
                           "LLM); agent_model writes the summaries with this node's model, checked by the server, "
                           "which never receives a Dify credential.",
                   help_zh="server 在服务端压缩（离线抽取，除非运维配置了 LLM）；agent_model 用本节点的模型写摘要，"
                           "由服务端校验，服务端不会收到 Dify 凭据。"),
            _param("agent_id", "string", "Agent ID", "智能体 ID",
                   help_en="Memory scope; default: the app.", help_zh="记忆范围；默认为应用。"),
            _param("user_id", "string", "User ID", "用户 ID",
                   help_en="Memory scope; default: Dify's user.", help_zh="记忆范围；默认为 Dify 用户。"),
            _param("session_id", "string", "Session ID", "会话 ID",
                   help_en="Memory scope; default: the conversation.", help_zh="记忆范围；默认为当前会话。"),
        ],
        "extra": {"python": {"source": f"strategies/{STRATEGY_NAME}.py"}},
    }
