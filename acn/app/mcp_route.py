"""The nodes as a Model Context Protocol server at /mcp (Streamable HTTP), on the server's own port.

A Flask route, so an MCP request passes the same checks as a node's: Host and Origin first (acn/app/http_guard.py:
the Origin check the MCP transport spec asks for against DNS rebinding, and the Host check that closes it), then
the API key as `Authorization: Bearer` through the wrong-key throttle (acn/app/key_guard.py) to the tenant, the
body limit (ACN_MAX_BODY_BYTES: 413) and the JSON checks every body gets (acn/app/json_body.py); refusals are the
HTTP error envelope (401, 403, 413, ...) before any MCP. Then the official SDK answers (acn/app/mcp_server.py),
and the request is counted and logged like any other (`acn_requests{route="/mcp"}`, plus
`acn_mcp_tool_calls{tool, outcome}` per tools/call). It runs the same under waitress and gunicorn: nothing here
depends on how the WSGI app is served.

The SDK (~0.6 s of imports, 1.5 s on a busy machine) is loaded on a background thread once the server starts
(`prepare_in_background`, from `python server.py` and gunicorn's worker start, after the start-up warmer's first
index), and /readyz says `mcp_tools` until it is: the first /mcp call costs what a later one does (issue 47). An app
built without serving (tests, create_app alone) loads it at its first /mcp request.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from flask import Flask, Request, Response, current_app, g, request

from acn.app.json_body import read_json_body
from acn.app.runtime import Runtime
from acn.common.metrics import Metrics
from acn.nodes.spec import NodeSpec

if TYPE_CHECKING:
    from acn.app.mcp_server import Toolbox
    from acn.app.mcp_tools import Observers

MCP_PATH = "/mcp"
AFTER_WAIT = 30.0  # seconds the SDK's imports wait at most for the start-up work named (prepare_in_background)
# The SDK's headers that describe its body; the WSGI side sets its own for the body it sends.
FRAMING_HEADERS = frozenset({"content-length", "transfer-encoding", "connection"})


class McpEndpoint:
    """The /mcp answerer of one app: its tools are built at the first request, then shared."""

    def __init__(self, nodes: dict[str, NodeSpec], max_body_bytes: int) -> None:
        self.nodes = nodes
        self.max_body_bytes = max_body_bytes
        self._lock = threading.Lock()
        self._toolbox: Toolbox | None = None
        self._preparing: threading.Thread | None = None

    def prepare_in_background(self, after: threading.Event | None = None) -> None:
        """Import the SDK and build the tools on a daemon thread (the first request would otherwise pay for it),
        once `after` is set (AFTER_WAIT at most): the start-up warmer's first index (Warmer.first_loaded), which a
        request sent before /readyz may be waiting for."""
        def prepare() -> None:
            if after is not None:
                after.wait(AFTER_WAIT)
            self.toolbox()

        self._preparing = threading.Thread(target=prepare, name="acn-mcp-tools", daemon=True)
        self._preparing.start()

    def pending(self) -> list[str]:
        """Return ["mcp_tools"] while the background preparation runs (for /readyz)."""
        return ["mcp_tools"] if self._preparing is not None and self._preparing.is_alive() else []

    def toolbox(self) -> Toolbox:
        """Return the tools, importing the SDK and building them the first time."""
        with self._lock:
            if self._toolbox is None:
                from acn.app.mcp_server import build_toolbox

                self._toolbox = build_toolbox(self.nodes)
            return self._toolbox

    def answer(self, runtime: Runtime, tenant: str, request_id: str, metrics: Metrics) -> Response:
        """Answer the current request through the SDK, for the tenant its key named."""
        from acn.app.mcp_server import build_server, serve_exchange

        read_json_body()  # refuses what a node body may not be: not JSON, not UTF-8, too deep, duplicate keys
        body = request.get_data(cache=True)
        server = build_server(self.toolbox(), runtime.deps(tenant), request_id, observers(metrics))
        exchange = serve_exchange(server, asgi_scope(request), body, self.max_body_bytes)
        headers = [(name, value) for name, value in exchange.headers if name.lower() not in FRAMING_HEADERS]
        return Response(exchange.body, status=exchange.status, headers=headers)


def observers(metrics: Metrics) -> Observers:
    """Return where a tool call is counted: the node's signals as over HTTP, errors by code, calls by tool."""
    from acn.app.mcp_tools import Observers

    return Observers(result=metrics.observe_result, error=metrics.observe_error, call=metrics.observe_mcp_call)


def asgi_scope(incoming: Request) -> dict[str, Any]:
    """Return the ASGI HTTP scope of a WSGI request (the body is handed over separately)."""
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in incoming.headers.items()]
    return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": "1.1",
            "method": incoming.method, "scheme": incoming.scheme, "path": incoming.path,
            "raw_path": incoming.path.encode("utf-8"), "query_string": incoming.query_string, "root_path": "",
            "headers": headers, "client": (incoming.remote_addr or "", 0), "server": None}


def register_mcp(app: Flask, runtime: Runtime, nodes: dict[str, NodeSpec]) -> None:
    """Serve the tools at /mcp.

    POST only: a stateless server has no stream to open (GET) and no session to end (DELETE), and the transport
    spec's answer to both is then 405, which Flask gives (the JSON envelope, `Allow: POST`).
    """
    endpoint = McpEndpoint(nodes, runtime.settings.max_body_bytes)
    app.extensions["acn_mcp"] = endpoint

    @app.post(MCP_PATH)
    def _mcp() -> Response:
        return endpoint.answer(runtime, g.tenant, g.get("request_id", ""), current_app.extensions["acn_metrics"])
