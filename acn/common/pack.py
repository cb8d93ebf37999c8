"""The pack's name, version and description: the one source for pyproject, manifest.yaml, OpenAPI and /healthz."""

from __future__ import annotations

from typing import Any

# pyproject.toml reads this (dynamic version); manifest.yaml and the OpenAPI document are generated from PACK.
VERSION = "0.1.0"
PACK: dict[str, Any] = {
    "name": "agent_context_nodes",
    "version": VERSION,
    "author": "agent-context-nodes",
    "label": {"en_US": "Agent Context Nodes", "zh_Hans": "Agent 上下文节点"},
    "description": {
        "en_US": "Workflow nodes that keep LLM agents from forgetting: context editing, structured compaction, "
                 "memory write/retrieve and budgeted context assembly over one Milvus store.",
        "zh_Hans": "让 LLM Agent 在长对话中不失忆的工作流节点：上下文编辑、结构化压缩、记忆读写与按预算组装上下文，"
                   "共用一个 Milvus 存储。",
    },
}
