"""One MCP exchange through the official SDK: its lowlevel Server, its Streamable HTTP transport, stateless.

acn/app/mcp_route.py hands over one HTTP request (already past the Host, Origin, key and body checks) as an ASGI
scope and body; `serve_exchange` runs the SDK's `StreamableHTTPSessionManager` (stateless, JSON responses) for
it under `anyio.run` in the calling thread and returns the status, headers and body the SDK answered. Stateless:
no session id and no server-sent event stream, so a replica behind a load balancer answers any request, and a
process keeps nothing per client between requests. Each request gets a Server of its own whose handlers hold the
request's dependencies (the tenant among them): nothing of one caller is reachable from another's handler.

The node then runs in the request's own thread, as the HTTP route runs it (the store's read priority knows
request threads: acn/storage/database/lite/read_priority.py), and a slow call blocks no loop but its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.types import Message, Scope

from acn.app.mcp_tools import INSTRUCTIONS, Observers, build_tools, call_tool, tool_specs
from acn.common.pack import VERSION
from acn.nodes.spec import NodeSpec
from acn.services.deps import Deps

SERVER_NAME = "agent-context-nodes"
# What a client may speak: the initialize handshake's revisions and the per-request envelope's (the SDK's sets).
PROTOCOL_VERSIONS = (*HANDSHAKE_PROTOCOL_VERSIONS, *MODERN_PROTOCOL_VERSIONS)
# Host and Origin are checked before the request gets here (acn/app/http_guard.py, ACN_ALLOWED_HOSTS and
# ACN_CORS_ORIGINS), by the same rules as every route; the SDK's own copy of those checks stays off.
CHECKED_BEFORE = TransportSecuritySettings(enable_dns_rebinding_protection=False)


@dataclass(frozen=True)
class Toolbox:
    """The served tools, built once per app: their nodes by name and their tools/list entries."""

    specs: dict[str, NodeSpec]
    tools: list[types.Tool]


@dataclass
class Exchange:
    """What the SDK answered one HTTP request with."""

    status: int = 500
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""


def build_toolbox(nodes: Mapping[str, NodeSpec]) -> Toolbox:
    """Return the tools of the served nodes (schemas generated from the request models here, once)."""
    logging.getLogger("mcp").setLevel(logging.WARNING)  # the SDK logs every stateless exchange's start at INFO
    specs = tool_specs(nodes)
    return Toolbox(specs=specs, tools=build_tools(specs))


def build_server(toolbox: Toolbox, deps: Deps, request_id: str, observers: Observers) -> Server[Any]:
    """Return a Server for one request: tools/list and tools/call, calls run for this request's tenant."""

    async def list_tools(_ctx: ServerRequestContext[Any], _params: types.PaginatedRequestParams | None
                         ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=toolbox.tools)

    async def call(_ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        return call_tool(toolbox.specs, params.name, params.arguments, deps, request_id, observers)

    return Server(SERVER_NAME, version=VERSION, title="Agent Context Nodes", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call)


def serve_exchange(server: Server[Any], scope: Scope, body: bytes, max_body_bytes: int) -> Exchange:
    """Answer one HTTP request with the SDK's stateless Streamable HTTP transport; return what it sent."""
    return anyio.run(_serve, server, scope, body, max_body_bytes)


async def _serve(server: Server[Any], scope: Scope, body: bytes, max_body_bytes: int) -> Exchange:
    manager = StreamableHTTPSessionManager(app=server, json_response=True, stateless=True,
                                           security_settings=CHECKED_BEFORE, max_request_body_size=max_body_bytes)
    exchange = Exchange()
    answered = anyio.Event()
    chunks: list[bytes] = []
    delivered = False

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:  # the whole body at once: the WSGI side has read (and size-checked) it already
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await answered.wait()  # as an ASGI server does: the client is there until the answer is sent
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            exchange.status = int(message["status"])
            exchange.headers = [(bytes(k).decode("latin-1"), bytes(v).decode("latin-1"))
                                for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
            if not message.get("more_body", False):
                answered.set()

    async with manager.run():
        await manager.handle_request(scope, receive, send)
    exchange.body = b"".join(chunks)
    return exchange
