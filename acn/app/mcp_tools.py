"""The nodes as Model Context Protocol tools: their list, and one call from arguments to a result.

No transport here (acn/app/mcp_route.py serves these at /mcp). A tool is a node: its name is the node's, its
description the node's LLM-facing text in English and Chinese (acn/nodes/*.py, one place), its inputSchema the
JSON Schema of the node's request model — the very schema `schemas/<node>.request.json` holds, with its `$ref`s
written out in place, pydantic's titles left out and each nullable field's types named in its own `type` (Dify
reads a tool's parameters from `properties` by their `type`, without following references). A call validates
the arguments against that model and runs the same function the HTTP route runs, for the caller's tenant; an
error is a result with isError whose structured content is the HTTP error envelope (acn/app/responses.py),
never a protocol error.

What an agent reads is kept small: an `assemble` answer is the context text (`prompt`) with its mode and size,
every field of the HTTP response only with `full: true`; the others answer with their HTTP response fields. The
text content is what a model reads first: the node's rendered text where it has one, else the same JSON.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from pydantic import BaseModel

from acn.app.openapi import request_schema
from acn.app.responses import validate
from acn.app.statuses import http_status, retry_after
from acn.common.errors import PackError, UnknownNodeError, ValidationError
from acn.common.models import NodeResponse
from acn.common.pack import PACK
from acn.nodes.spec import NodeSpec
from acn.services.deps import Deps

log = logging.getLogger("acn.mcp")

# The nodes a builder calls in a loop, in the order tools/list shows them. The session history routes
# (versions, rollback) and the memory administration stay HTTP-only: an agent has no business rolling back.
TOOL_NODES = ("memory_write", "memory_retrieve", "assemble", "record_turn", "compact", "edit_context",
              "session_state", "memory_prepare", "memory_observe")
# Tools that change nothing stored (a hint to hosts that ask before a tool writes).
READ_ONLY = frozenset({"memory_retrieve", "edit_context", "session_state", "memory_prepare"})
# The one argument a tool takes beyond its node's request model: assemble's answer with every HTTP field.
FULL = "full"
FULL_PROPERTY: dict[str, Any] = {
    "type": "boolean", "default": False,
    "description": "Answer with every field of the HTTP response (messages, layers, sources, dropped) instead "
                   "of the context text alone. 返回 HTTP 响应的全部字段，而不只是上下文文本。"}
# A node's own rendering of its answer, read as the text content (else the structured content as JSON).
TEXT_FIELDS = {"assemble": "prompt", "memory_retrieve": "text", "memory_prepare": "content"}
# JSON Schema keywords whose values are data, not schemas: nothing inside them is rewritten.
DATA_KEYWORDS = frozenset({"default", "enum", "const", "examples"})
INSTRUCTIONS = f"{PACK['description']['en_US']}\n{PACK['description']['zh_Hans']}\n" \
               "A chat loop: assemble (context for the model) → your model → record_turn (remember the turn). " \
               "memory_write / memory_retrieve keep and find facts across sessions.\n" \
               "对话循环：assemble（为模型组装上下文）→ 模型 → record_turn（记住本轮）。" \
               "memory_write / memory_retrieve 跨会话保存和查找事实。"


@dataclass(frozen=True)
class Observers:
    """Where a call is counted (acn/common/metrics.py): as the HTTP route counts, and by tool and outcome."""

    result: Callable[[str, BaseModel], None]  # (node, response): the node's quality signals
    error: Callable[[str], None]  # (code): errors by code, as every error envelope is counted
    call: Callable[[str, str], None]  # (tool, outcome): "ok" or the error code


def tool_specs(nodes: Mapping[str, NodeSpec]) -> dict[str, NodeSpec]:
    """Return the nodes served as tools, by tool name (a node missing from the registry is left out)."""
    return {name: nodes[name] for name in TOOL_NODES if name in nodes}


def build_tools(specs: Mapping[str, NodeSpec]) -> list[types.Tool]:
    """Return the tools/list entries of the served nodes."""
    return [build_tool(spec) for spec in specs.values()]


def build_tool(spec: NodeSpec) -> types.Tool:
    """Return one node's tool: name, English and Chinese description, input schema from its request model."""
    return types.Tool(
        name=spec.name, title=spec.summary, description=tool_description(spec), input_schema=input_schema(spec),
        annotations=types.ToolAnnotations(read_only_hint=spec.name in READ_ONLY,
                                          destructive_hint=False if spec.name not in READ_ONLY else None,
                                          open_world_hint=False))


def tool_description(spec: NodeSpec) -> str:
    """Return what a model reads to choose the tool: the node's LLM-facing description, English then Chinese."""
    return f"{spec.description.llm_en}\n{spec.description.llm_zh}"


def input_schema(spec: NodeSpec) -> dict[str, Any]:
    """Return the node's request schema, self-contained and without titles (assemble also takes `full`)."""
    schema = request_schema(spec)
    body = typed_unions(without_titles(inline_refs(schema, schema.get("$defs", {}))))
    if spec.name == "assemble":
        if FULL in body.get("properties", {}):
            raise ValueError(f"assemble's request model has a field {FULL!r}: the MCP flag needs another name")
        body["properties"] = {**body.get("properties", {}), FULL: FULL_PROPERTY}
    return dict(body)


def inline_refs(schema: Any, definitions: Mapping[str, Any], path: tuple[str, ...] = ()) -> Any:
    """Return schema with every `#/$defs/<name>` reference replaced by the definition (and `$defs` dropped)."""
    if isinstance(schema, list):
        return [inline_refs(item, definitions, path) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "$defs":
            continue
        if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
            name = value.rsplit("/", 1)[-1]
            if name in path:  # a model that contains itself cannot be written out; none of ours does
                raise ValueError(f"recursive schema {name!r} cannot be inlined")
            out.update(inline_refs(definitions[name], definitions, (*path, name)))
        else:
            out[key] = value if key in DATA_KEYWORDS else inline_refs(value, definitions, path)
    return out


def typed_unions(schema: Any) -> Any:
    """Return schema with a `type` list beside each `anyOf` whose branches all name their types.

    `str | None` is `anyOf: [{type: string}, {type: null}]` with no `type` of its own, and Dify reads a tool
    parameter's type from `type` alone (a property without one becomes a string). `type: [string, null]` beside
    it admits exactly what the branches admit, so validation does not change.
    """
    if isinstance(schema, list):
        return [typed_unions(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: value if key in DATA_KEYWORDS or key == "properties" else typed_unions(value)
           for key, value in schema.items()}
    if "properties" in schema and isinstance(schema["properties"], dict):
        out["properties"] = {name: typed_unions(prop) for name, prop in schema["properties"].items()}
    branches = out.get("anyOf")
    if "type" not in out and isinstance(branches, list) and branches \
            and all(isinstance(b, dict) and "type" in b for b in branches):
        names: list[str] = []
        for branch in branches:
            for name in branch["type"] if isinstance(branch["type"], list) else [branch["type"]]:
                if name not in names:
                    names.append(name)
        out["type"] = names[0] if len(names) == 1 else names
    return out


def without_titles(schema: Any) -> Any:
    """Return schema without pydantic's `title` keywords (a property named title is kept)."""
    if isinstance(schema, list):
        return [without_titles(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {name: without_titles(prop) for name, prop in value.items()}
        elif key in DATA_KEYWORDS:
            out[key] = value
        elif key != "title":
            out[key] = without_titles(value)
    return out


# -- a call ----------------------------------------------------------------------------------


def call_tool(specs: Mapping[str, NodeSpec], name: str, arguments: Mapping[str, Any] | None, deps: Deps,
              request_id: str, observers: Observers) -> types.CallToolResult:
    """Run one tool call as the HTTP route runs its node; every failure is an isError result."""
    label = name if name in specs else "unknown"
    try:
        spec = specs.get(name)
        if spec is None:
            raise UnknownNodeError(f"unknown tool {name[:64]!r}; tools: {', '.join(specs)}")
        values = dict(arguments or {})
        full = pop_full(values) if name == "assemble" else False
        result = spec.run(validate(spec.request_model, values), deps)
    except PackError as error:
        observers.error(error.code)
        observers.call(label, error.code)
        return error_result(http_status(error), error.code, error.message, error.errors, request_id,
                            retry_after(error))
    except Exception as error:  # as the HTTP edge's 500: logged with the request id, no traceback in the answer
        log.error("unexpected error", exc_info=error, extra={"request_id": request_id})
        observers.error("internal_error")
        observers.call(label, "internal_error")
        return error_result(500, "internal_error", "unexpected server error; see the logs for this request_id",
                            None, request_id, None)
    observers.result(name, result)
    observers.call(label, "ok")
    return answer(name, result.model_copy(update={"request_id": request_id}), full=full)


def pop_full(values: dict[str, Any]) -> bool:
    """Take assemble's `full` flag out of the arguments (the request model does not know it)."""
    full = values.pop(FULL, False)
    if not isinstance(full, bool):
        raise ValidationError(f"{FULL}: Input should be a valid boolean", [f"{FULL}: Input should be a valid boolean"])
    return full


def answer(name: str, result: NodeResponse, *, full: bool) -> types.CallToolResult:
    """Return a node's success as a tool result: structured content and the text a model reads."""
    data = result.model_dump(mode="json")
    if name == "assemble" and not full:
        data = assemble_view(data)
    field = "context" if name == "assemble" and not full else TEXT_FIELDS.get(name, "")
    text = data.get(field) if field else None
    if not isinstance(text, str) or not text:
        text = compact_json(data)
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=data)


def assemble_view(data: dict[str, Any]) -> dict[str, Any]:
    """Return assemble's small answer: the context text, the mode, its tokens (and what it went without)."""
    view: dict[str, Any] = {"context": data["prompt"], "mode": data["mode"], "tokens": data["tokens"]["total"]}
    if data.get("degraded"):
        view["degraded"] = data["degraded"]
    view["request_id"] = data.get("request_id", "")
    return view


def error_result(status: int, code: str, message: str, errors: Iterable[str] | None, request_id: str,
                 retry_seconds: int | None) -> types.CallToolResult:
    """Return an isError result carrying the HTTP error envelope; the text names the code and each field."""
    details = list(errors or [message])
    body = {"ok": False, "status": status, "code": code, "error": message, "errors": details,
            "request_id": request_id}
    text = f"{code}: {message}" + (f" (retry in {retry_seconds} s)" if retry_seconds is not None else "")
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=body, is_error=True)


def compact_json(data: Any) -> str:
    """Return data as JSON without spaces (Chinese as itself, not \\u escapes)."""
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))
