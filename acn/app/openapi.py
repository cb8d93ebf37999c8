"""Build the OpenAPI 3.0 document, per-node JSON Schemas and manifest.yaml from the models.

`python -m acn.app.generate` writes them (with the integrations' files); `--check` fails when they are stale.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from acn.common.pack import PACK
from acn.nodes.spec import NodeSpec

ROOT = Path(__file__).resolve().parents[2]  # the checkout: schemas/ and manifest.yaml sit beside acn/
SCHEMA_DIR = ROOT / "schemas"
MANIFEST = ROOT / "manifest.yaml"
DEFAULT_SERVER = "http://127.0.0.1:8000"
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["ok", "status", "code", "error", "errors", "request_id"],
    "properties": {
        "ok": {"type": "boolean", "enum": [False]},
        "status": {"type": "integer"},
        "code": {"type": "string", "description": "Stable machine-readable code, e.g. validation_error."},
        "error": {"type": "string"},
        "errors": {"type": "array", "items": {"type": "string"}},
        "request_id": {"type": "string"},
    },
}


def admin_models() -> dict[str, type[BaseModel]]:
    """Return the models of the non-node routes (imported lazily to keep this module light)."""
    from acn.nodes.memory_admin import (
        DeleteResponse,
        MemoryGetResponse,
        MemoryImportRequest,
        MemoryImportResponse,
        MemoryListRequest,
        MemoryListResponse,
        NamespaceDeleteRequest,
    )

    return {"MemoryListRequest": MemoryListRequest, "MemoryListResponse": MemoryListResponse,
            "MemoryGetResponse": MemoryGetResponse, "NamespaceDeleteRequest": NamespaceDeleteRequest,
            "DeleteResponse": DeleteResponse, "MemoryImportRequest": MemoryImportRequest,
            "MemoryImportResponse": MemoryImportResponse}


def build_openapi(nodes: dict[str, NodeSpec], server_url: str = DEFAULT_SERVER) -> dict[str, Any]:
    """Return the OpenAPI 3.0.3 document of the node routes: what Dify custom tools and Coze import.

    Dify's importer turns every operation into a tool an agent may call, so the administration routes (list,
    get and delete memories) live in their own document (`build_admin_openapi`).
    """
    paths: dict[str, Any] = {f"/v1/nodes/{spec.name}": {"post": node_operation(spec)} for spec in nodes.values()}
    return _document(nodes, {}, paths, server_url, PACK["description"]["en_US"])


def build_admin_openapi(nodes: dict[str, NodeSpec], server_url: str = DEFAULT_SERVER) -> dict[str, Any]:
    """Return the OpenAPI 3.0.3 document of the memory administration routes (never imported as agent tools)."""
    components = _components(nodes, admin_models())
    description = ("Operator routes of Agent Context Nodes: list, read, import and delete memories. Not for agent "
                   "tools: import /openapi.json (the nodes) into Dify or Coze instead.")
    return _document(nodes, admin_models(), admin_paths(components), server_url, description)


def _components(nodes: dict[str, NodeSpec], extra: dict[str, type[BaseModel]]) -> dict[str, Any]:
    pairs: list[tuple[type[BaseModel], Any]] = []
    for spec in nodes.values():
        pairs += [(spec.request_model, "validation"), (spec.response_model, "serialization")]
    pairs += [(extra[name], "validation" if name.endswith("Request") else "serialization") for name in extra]
    _, definitions = models_json_schema(pairs, ref_template="#/components/schemas/{model}")
    components = {name: to_openapi30(schema) for name, schema in definitions.get("$defs", {}).items()}
    components = {name: type_wrapped_refs(schema, components) for name, schema in components.items()}
    components["Error"] = ERROR_SCHEMA
    return components


def _document(nodes: dict[str, NodeSpec], extra: dict[str, type[BaseModel]], paths: dict[str, Any],
              server_url: str, description: str) -> dict[str, Any]:
    """Return an OpenAPI document of paths with only the component schemas they reference."""
    components = _components(nodes, extra)
    used = referenced_components(paths, components)
    return {
        "openapi": "3.0.3",
        "info": {"title": PACK["label"]["en_US"], "version": PACK["version"], "description": description},
        "servers": [{"url": server_url}],
        "paths": paths,
        "components": {
            "schemas": {name: schema for name, schema in sorted(components.items()) if name in used},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
    }


def referenced_components(start: Any, components: dict[str, Any]) -> set[str]:
    """Return the names of the component schemas reachable by $ref from start."""
    used: set[str] = set()
    pending = [start]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
                name = ref.rsplit("/", 1)[-1]
                if name not in used:
                    used.add(name)
                    pending.append(components.get(name, {}))
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return used


def node_operation(spec: NodeSpec) -> dict[str, Any]:
    """Return the POST operation of one node."""
    return {
        "operationId": spec.name,
        "summary": spec.summary,
        "description": spec.description.llm_en,
        "requestBody": {"required": True, "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{spec.request_model.__name__}"}}}},
        "responses": _responses(spec.response_model.__name__),
    }


def _responses(model_name: str) -> dict[str, Any]:
    return {
        "200": {"description": "Success", "content": {"application/json": {
            "schema": {"$ref": f"#/components/schemas/{model_name}"}}}},
        "default": {"description": "Error", "content": {"application/json": {
            "schema": {"$ref": "#/components/schemas/Error"}}}},
    }


def admin_paths(components: dict[str, Any]) -> dict[str, Any]:
    """Return the memory administration paths (query parameters from their request models)."""
    list_params = query_parameters(components["MemoryListRequest"])
    delete_params = query_parameters(components["NamespaceDeleteRequest"])
    memory_id = [{"name": "memory_id", "in": "path", "required": True, "schema": {"type": "string"}}]
    return {
        "/v1/memories": {
            "get": {"operationId": "memory_list", "summary": "List a namespace's memories with paging",
                    "parameters": list_params, "responses": _responses("MemoryListResponse")},
            "delete": {"operationId": "memory_delete_namespace", "summary": "Delete a namespace's memories",
                       "parameters": delete_params, "responses": _responses("DeleteResponse")},
        },
        "/v1/memories/import": {
            "post": {"operationId": "memory_import", "summary": "Restore exported memories verbatim (by id)",
                     "requestBody": {"required": True, "content": {"application/json": {
                         "schema": {"$ref": "#/components/schemas/MemoryImportRequest"}}}},
                     "responses": _responses("MemoryImportResponse")},
        },
        "/v1/memories/{memory_id}": {
            "get": {"operationId": "memory_get", "summary": "Get one memory with its history",
                    "parameters": memory_id, "responses": _responses("MemoryGetResponse")},
            "delete": {"operationId": "memory_delete", "summary": "Delete one memory",
                       "parameters": memory_id, "responses": _responses("DeleteResponse")},
        },
    }


def query_parameters(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Return OpenAPI query parameters for the properties of an object schema."""
    required = set(schema.get("required", []))
    params = []
    for name, prop in schema.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        if prop.get("type") == "array":
            prop = {"type": "string", "description": "Comma-separated list.", "nullable": True}
        params.append({"name": name, "in": "query", "required": name in required, "schema": prop})
    return params


def to_openapi30(schema: Any) -> Any:
    """Return a JSON Schema (2020-12, as pydantic writes it) rewritten in OpenAPI 3.0's dialect."""
    if isinstance(schema, list):
        return [to_openapi30(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {k: to_openapi30(v) for k, v in schema.items() if k not in ("title", "examples")}
    if "const" in schema:
        schema["enum"] = [schema.pop("const")]
    # JSON Schema 2020-12 writes exclusive bounds as numbers; OpenAPI 3.0 as booleans beside minimum/maximum.
    for exclusive, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(schema.get(exclusive), (int, float)) and not isinstance(schema[exclusive], bool):
            schema[bound] = schema.pop(exclusive)
            schema[exclusive] = True
    any_of = schema.get("anyOf")
    if isinstance(any_of, list) and any(part == {"type": "null"} for part in any_of):
        rest = [part for part in any_of if part != {"type": "null"}]
        schema.pop("anyOf")
        if len(rest) == 1:
            inner = rest[0]
            if "$ref" in inner:
                schema["allOf"] = [inner]
            else:
                schema.update(inner)
        else:
            schema["anyOf"] = rest
        schema["nullable"] = True
    if schema.get("additionalProperties") is True:
        schema.pop("additionalProperties")
    return schema


def type_wrapped_refs(schema: Any, components: dict[str, Any]) -> Any:
    """Give every `allOf: [$ref]` wrapper (a nullable or described reference) the referenced schema's type.

    Dify's custom-tool importer converts a body property by its `type` (an untyped property is sent as null)
    and coze-studio's converter rejects untyped properties, so each property must carry one.
    """
    if isinstance(schema, list):
        return [type_wrapped_refs(item, components) for item in schema]
    if not isinstance(schema, dict):
        return schema
    schema = {k: type_wrapped_refs(v, components) for k, v in schema.items()}
    wrapped = schema.get("allOf")
    if "type" not in schema and isinstance(wrapped, list) and len(wrapped) == 1 and "$ref" in wrapped[0]:
        target = components.get(wrapped[0]["$ref"].rsplit("/", 1)[-1], {})
        if "type" in target:
            schema["type"] = target["type"]
    return schema


def node_schemas(nodes: dict[str, NodeSpec]) -> dict[str, dict[str, Any]]:
    """Return file name -> standalone JSON Schema for each node's request and response."""
    files = {}
    for spec in nodes.values():
        files[f"{spec.name}.request.json"] = request_schema(spec)
        files[f"{spec.name}.response.json"] = spec.response_model.model_json_schema(mode="serialization")
    return files


def request_schema(spec: NodeSpec) -> dict[str, Any]:
    """Return the JSON Schema of a node's request: schemas/<node>.request.json, and its MCP tool's inputSchema."""
    return spec.request_model.model_json_schema(mode="validation")


def build_manifest(nodes: dict[str, NodeSpec]) -> dict[str, Any]:
    """Return the pack manifest: identity plus every node with its route, schemas and descriptions."""
    manifest = copy.deepcopy(PACK)
    manifest["openapi"] = "schemas/openapi.json"
    manifest["openapi_admin"] = "schemas/openapi-admin.json"
    manifest["nodes"] = [
        {
            "name": spec.name,
            "route": f"POST /v1/nodes/{spec.name}",
            "summary": spec.summary,
            "stateful": spec.stateful,
            "request_schema": f"schemas/{spec.name}.request.json",
            "response_schema": f"schemas/{spec.name}.response.json",
            "description": {
                "human": {"en_US": spec.description.human_en, "zh_Hans": spec.description.human_zh},
                "llm": {"en_US": spec.description.llm_en, "zh_Hans": spec.description.llm_zh},
            },
        }
        for spec in nodes.values()
    ]
    return manifest
