"""Call the Agent Context Nodes server and turn its answer into Dify tool messages."""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from typing import Any

import httpx
from dify_plugin import Tool
from dify_plugin.entities.tool import ToolInvokeMessage

# Dify's own API-tool timeouts are 10 s to connect and 60 s to read; match them.
TIMEOUT = httpx.Timeout(60.0, connect=10.0)
# The text output (what an agent's LLM reads) is the node's rendered text where it has one.
TEXT_FIELDS = {"assemble": "prompt", "memory_retrieve": "text", "compact": "working_summary"}
# Message lists also come as one JSON string, ready for the next tool's `messages` parameter.
JSON_TWINS = ("messages", "recent_messages")
# A Dify tool node's built-in outputs: not sent as variables (memory_retrieve's `text` is the text message).
RESERVED_OUTPUTS = frozenset({"text", "files", "json"})
# compact's `prompt` (engine caller) is for a program driving the exchange (the agent strategy), which reads the
# JSON; as a workflow variable it would be an object that is null on every other answer.
EXCHANGE_OUTPUTS = {"compact": frozenset({"prompt"})}


# Dify's external-memory callbacks time out after 10 s by default: answer (or fail) before that.
CALLBACK_TIMEOUT = httpx.Timeout(8.0, connect=3.0)
# What each callback's one JSON message carries (Dify's contract; the server's extra fields stay here).
CONTRACT_FIELDS = {"memory_prepare": ("status", "content", "content_bytes"), "memory_observe": ("status",)}


class NodeCallError(Exception):
    """The server could not be reached or answered with an error."""


def invoke_node(tool: Tool, node: str, parameters: Mapping[str, Any]) -> Generator[ToolInvokeMessage, None, None]:
    """Run one node on the server; yield its JSON, one variable per output field, and a text message."""
    result = call_node(tool.runtime.credentials, node, request_body(parameters))
    yield tool.create_json_message(result)
    for name, value in result.items():
        if name == "ok" or name in RESERVED_OUTPUTS or name in EXCHANGE_OUTPUTS.get(node, ()):
            continue
        yield tool.create_variable_message(name, "" if value is None else value)
        if name in JSON_TWINS:
            yield tool.create_variable_message(f"{name}_json", json.dumps(value, ensure_ascii=False))
    field = TEXT_FIELDS.get(node)
    text = result[field] if field else json.dumps(result, ensure_ascii=False)
    yield tool.create_text_message(text)


def invoke_external_memory(tool: Tool, node: str,
                           parameters: Mapping[str, Any]) -> Generator[ToolInvokeMessage, None, None]:
    """Run a Dify Agent V2 external-memory callback: exactly one JSON message, as the contract asks. A failure
    raises: Dify then disables the callback for the rest of the run and retries on the next run."""
    body = {name: as_object(name, parameters.get(name)) for name in ("memory_context", "request")}
    result = call_node(tool.runtime.credentials, node, body, timeout=CALLBACK_TIMEOUT)
    yield tool.create_json_message({name: result[name] for name in CONTRACT_FIELDS[node]})


def as_object(name: str, value: Any) -> dict[str, Any]:
    """Return the parameter as an object: Dify passes objects; a JSON string of one is accepted too."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise NodeCallError(f"{name} must be a JSON object") from None
    if not isinstance(value, dict):
        raise NodeCallError(f"{name} must be an object, not {type(value).__name__}")
    return value


def request_body(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """Return the request body: Dify sends unset optional parameters as None or ''; the server's defaults apply."""
    return {name: value for name, value in parameters.items() if value is not None and value != ""}


def call_node(credentials: Mapping[str, Any], node: str, body: dict[str, Any],
              timeout: httpx.Timeout = TIMEOUT) -> dict[str, Any]:
    """POST the body to /v1/nodes/<node> and return the success envelope, or raise NodeCallError."""
    url = f"{base_url(credentials)}/v1/nodes/{node}"
    try:
        response = httpx.post(url, json=body, headers=headers(credentials), timeout=timeout)
    except httpx.HTTPError as error:
        raise NodeCallError(f"cannot reach {url}: {error}") from None
    return parse_response(node, response)


def check_server(credentials: Mapping[str, Any]) -> None:
    """Raise NodeCallError unless the server answers and accepts the API key (a stateless call)."""
    url = f"{base_url(credentials)}/healthz"
    try:
        health = httpx.get(url, timeout=TIMEOUT)
    except httpx.HTTPError as error:
        raise NodeCallError(f"cannot reach {url}: {error}") from None
    if health.status_code != 200:
        raise NodeCallError(f"{url} answered HTTP {health.status_code}; is this an Agent Context Nodes server?")
    call_node(credentials, "edit_context", {"messages": []})


def base_url(credentials: Mapping[str, Any]) -> str:
    url = str(credentials.get("base_url") or "").strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise NodeCallError("base_url must start with http:// or https://")
    return url


def headers(credentials: Mapping[str, Any]) -> dict[str, str]:
    result = {"Content-Type": "application/json", "User-Agent": "agent-context-nodes-dify-plugin"}
    key = str(credentials.get("api_key") or "").strip()
    if key:
        result["Authorization"] = f"Bearer {key}"
    return result


def parse_response(node: str, response: httpx.Response) -> dict[str, Any]:
    """Return the JSON body of a success; raise with the server's own error message otherwise."""
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code == 200 and isinstance(data, dict) and data.get("ok") is True:
        return data
    if isinstance(data, dict) and data.get("error"):
        detail = f"{data.get('code', 'error')}: {data['error']} (request_id {data.get('request_id', '')})"
    else:
        detail = response.text[:300]
    raise NodeCallError(f"{node} failed with HTTP {response.status_code}: {detail}")
