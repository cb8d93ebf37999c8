"""An independent MCP host: the OpenAI Agents SDK runs an agent on /mcp, its model scripted (no network model).

The scripted model writes a Chinese memory, looks it up, and answers with what the tool returned: the host lists
the tools, hands their schemas to the model, and carries the calls and results, all through its own MCP client.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from acn.app.mcp_tools import TOOL_NODES
from tests.conftest import missing_prerequisite, serving

try:
    from agents import Agent, Model, ModelResponse, Runner, Usage, set_tracing_disabled
    from agents.mcp import MCPServerStreamableHttp
    from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText
except ImportError:  # pragma: no cover - the test extra installs it
    Agent = None  # type: ignore[assignment,misc]

KEY = "mcp-agents-key-0123456789"
FACT = "我的会员卡号是 HZ-20240817"


class ScriptedModel(Model):
    """Answer from a script: one tool call per turn, then the last tool output as the final text."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]]) -> None:
        self.calls = calls
        self.tools_seen: list[str] = []
        self.outputs: list[str] = []

    async def get_response(self, system_instructions: str | None, input: Any, model_settings: Any, tools: list[Any],
                           output_schema: Any, handoffs: Any, tracing: Any, **_: Any) -> ModelResponse:
        self.tools_seen = [tool.name for tool in tools]
        self.outputs = [str(item["output"]) for item in input if isinstance(item, dict)
                        and item.get("type") == "function_call_output"]
        step = len(self.outputs)
        if step < len(self.calls):
            name, arguments = self.calls[step]
            item: Any = ResponseFunctionToolCall(type="function_call", call_id=f"call_{step}", name=name,
                                                 arguments=json.dumps(arguments, ensure_ascii=False))
        else:
            item = ResponseOutputMessage(id="msg_final", type="message", role="assistant", status="completed",
                                         content=[ResponseOutputText(type="output_text", text=self.outputs[-1],
                                                                     annotations=[])])
        return ModelResponse(output=[item], usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the script answers whole responses only")


def test_the_openai_agents_sdk_lists_calls_and_reads_the_tools() -> None:
    if Agent is None:
        missing_prerequisite("openai-agents is not installed (pip install '.[test]')")
    set_tracing_disabled(True)  # nothing leaves the machine
    namespace = {"agent_id": "agents-sdk", "session_id": f"s-{uuid.uuid4().hex[:12]}", "user_id": "u-agents"}
    model = ScriptedModel([
        ("memory_write", {**namespace, "items": [{"content": FACT, "kind": "identity"}]}),
        ("memory_retrieve", {**namespace, "query": "会员卡号"}),
    ])

    async def main(base: str) -> str:
        params = {"url": f"{base}/mcp", "headers": {"Authorization": f"Bearer {KEY}"}, "timeout": 60}
        async with MCPServerStreamableHttp(params=params, client_session_timeout_seconds=60) as server:  # type: ignore[arg-type]
            agent = Agent(name="memory", instructions="Use the memory tools.", model=model, mcp_servers=[server])
            result = await Runner.run(agent, "记住我的会员卡号，然后告诉我它是多少。")
            return str(result.final_output)

    with serving(ACN_API_KEYS=f"{KEY}:agents") as base:
        final = asyncio.run(main(base))
    assert model.tools_seen == list(TOOL_NODES)
    assert '"action":"added"' in model.outputs[0]
    assert FACT in final
    assert final == model.outputs[1]
