"""Dify API-based extension: `POST /v1/dify/extension` lets basic Dify apps inject memory without a workflow.

Register it in Dify under Settings → API Extension (endpoint `<server>/v1/dify/extension`, API key one of
ACN_API_KEYS), then add an "API-based variable" (external data tool) to a chat or completion app. Dify sends
`{"point", "params"}` with `Authorization: Bearer <key>` (api/core/extension/api_based_extension_requestor.py):
- `ping` → `{"result": "pong"}` (on save);
- `app.external_data_tool.query` with `{app_id, tool_variable, inputs, query}` → `{"result": <memory text>}`,
  retrieved for the query under agent_id = the app id. Dify passes no conversation id to this point, so
  session and user memories are included only when the app has inputs named `session_id` / `user_id`;
  otherwise the agent and shared scopes are searched.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from flask import Flask, Response, g, jsonify

from acn.app.json_body import read_json_body
from acn.app.runtime import Runtime
from acn.common.errors import BadRequestError, ValidationError
from acn.common.models import IDENTIFIER_PATTERN, Scope
from acn.nodes.memory_retrieve import run as retrieve
from acn.retrieval.hybrid_rank import MemoryRetrieveRequest, retrieval_query

ROUTE = "/v1/dify/extension"
POINTS = ("ping", "app.external_data_tool.query")
# Stands in for the conversation when Dify sends none; no memory is written under it.
NO_SESSION = "dify-extension"


def register_dify_extension(app: Flask, runtime: Runtime) -> None:
    """Add the extension route; authentication is the server's (a Bearer key from ACN_API_KEYS)."""

    @app.post(ROUTE)
    def _dify_extension() -> Response:
        # The nodes' parser: content type, depth (no RecursionError → 500), duplicate keys, NaN, surrogates.
        body = read_json_body()
        if not isinstance(body.get("point"), str):
            raise BadRequestError('expected a JSON object {"point": ..., "params": {...}}')
        point, params = body["point"], body.get("params") or {}
        if point == "ping":
            return jsonify({"result": "pong"})
        if point == "app.external_data_tool.query":
            if not isinstance(params, dict):
                raise ValidationError("params must be an object")
            return jsonify({"result": external_data(params, runtime, g.tenant)})
        raise BadRequestError(f"point {point!r} is not supported; this endpoint answers {', '.join(POINTS)}")


def external_data(params: dict[str, Any], runtime: Runtime, tenant: str) -> str:
    """Return the memory block for the query: tagged lines, most relevant first (empty when none)."""
    raw_inputs = params.get("inputs")
    inputs: dict[str, Any] = raw_inputs if isinstance(raw_inputs, dict) else {}
    session = identifier(str(inputs.get("session_id") or ""))
    user = identifier(str(inputs.get("user_id") or ""))
    scopes: list[Scope] = ["session", "user", "agent", "shared"] if session else ["agent", "shared"]
    if user and not session:
        scopes.insert(0, "user")
    query = params.get("query")
    if not isinstance(query, str) or not query.strip():
        return ""
    retrieval = MemoryRetrieveRequest(agent_id=identifier(str(params.get("app_id") or "")) or "dify-app",
                                      session_id=session or NO_SESSION, user_id=user or None,
                                      query=retrieval_query(query), scopes=scopes)
    return retrieve(retrieval, runtime.deps(tenant)).text


def identifier(value: str) -> str:
    """Return the value if it is a valid identifier, else a stable hash of it (empty stays empty)."""
    value = value.strip()
    if not value or re.fullmatch(IDENTIFIER_PATTERN, value):  # not match: "$" passes a trailing newline
        return value
    return "h-" + hashlib.sha256(value.encode("utf-8")).hexdigest()[:24]
