"""Dify tool edit_context: POST /v1/nodes/edit_context on the Agent Context Nodes server (generated)."""

from collections.abc import Generator
from typing import Any

from dify_plugin import Tool
from dify_plugin.entities.tool import ToolInvokeMessage

from acn_client import invoke_node


class EditContextTool(Tool):
    def _invoke(self, tool_parameters: dict[str, Any]) -> Generator[ToolInvokeMessage, None, None]:
        yield from invoke_node(self, "edit_context", tool_parameters)
