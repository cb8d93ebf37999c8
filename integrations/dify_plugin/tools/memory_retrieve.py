"""Dify tool memory_retrieve: POST /v1/nodes/memory_retrieve on the Agent Context Nodes server (generated)."""

from collections.abc import Generator
from typing import Any

from dify_plugin import Tool
from dify_plugin.entities.tool import ToolInvokeMessage

from acn_client import invoke_node


class MemoryRetrieveTool(Tool):
    def _invoke(self, tool_parameters: dict[str, Any]) -> Generator[ToolInvokeMessage, None, None]:
        yield from invoke_node(self, "memory_retrieve", tool_parameters)
