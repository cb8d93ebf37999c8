"""Dify tool memory_prepare: POST /v1/nodes/memory_prepare on the Agent Context Nodes server (generated)."""

from collections.abc import Generator
from typing import Any

from dify_plugin import Tool
from dify_plugin.entities.tool import ToolInvokeMessage

from acn_client import invoke_external_memory


class MemoryPrepareTool(Tool):
    def _invoke(self, tool_parameters: dict[str, Any]) -> Generator[ToolInvokeMessage, None, None]:
        yield from invoke_external_memory(self, "memory_prepare", tool_parameters)
