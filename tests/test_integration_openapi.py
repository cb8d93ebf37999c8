"""The OpenAPI documents against the rules of Dify's custom-tool importer and coze-studio's validator, an
OpenAPI 3.0 validator, and the live server; the Coze manifest and the Coze code-node snippet."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
import requests
import yaml
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

from acn.integrations.generate import COZE_DIR, TOOL_NODES
from tests.conftest import ROOT
from tests.integration_support import LiveServer, run_py312

pytest_plugins = ("tests.integration_fixtures",)

METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
# coze-studio backend/crossdomain/plugin/model/openapi.go: the request media types it accepts.
COZE_BODY_MEDIA = {"application/json", "application/problem+json", "application/x-www-form-urlencoded",
                   "application/x-yaml", "application/yaml"}
COZE_TYPES = {"string", "integer", "number", "boolean", "object", "array"}


def documents(server: LiveServer) -> dict[str, dict[str, Any]]:
    served = requests.get(f"{server.base_url}/openapi.json", timeout=10)
    assert served.status_code == 200 and served.headers["Content-Type"].startswith("application/json")
    return {"served": served.json(),
            "schemas/openapi.json": json.loads((ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8")),
            "coze/openapi.yaml": yaml.safe_load((COZE_DIR / "openapi.yaml").read_text(encoding="utf-8"))}


def operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(path, method, item[method]) for path, item in document["paths"].items()
            for method in METHODS if method in item]


def resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        target: Any = document
        for part in schema["$ref"].lstrip("#/").split("/"):
            target = target[part]
        schema = target
    return schema


def body_schema(document: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any] | None:
    content = operation.get("requestBody", {}).get("content", {})
    if not content:
        return None
    return resolve(document, next(iter(content.values()))["schema"])


# -- Dify custom tool (api/core/tools/utils/parser.py and custom_tool/tool.py) -----------------------


def dify_violations(document: dict[str, Any]) -> list[str]:
    """Return what Dify's importer would map badly: every operation becomes a tool named by operationId whose
    inputs are the body's top-level properties, each converted at call time by its `type`."""
    problems = []
    if len(document.get("servers", [])) != 1:
        problems.append("Dify uses servers[0] only: ship exactly one server")
    for path, method, operation in operations(document):
        where = f"{method.upper()} {path}"
        if not re.match(r"^[a-zA-Z0-9_-]{1,64}$", operation.get("operationId", "")):
            problems.append(f"{where}: operationId must name the tool ([a-zA-Z0-9_-]{{1,64}})")
        if not operation.get("summary"):
            problems.append(f"{where}: summary missing")
        schema = body_schema(document, operation)
        if schema is None:
            continue
        if schema.get("type") != "object" or not schema.get("properties"):
            problems.append(f"{where}: body must be an object with top-level properties")
            continue
        for name, prop in schema["properties"].items():
            # A property with neither `type` nor `$ref` nor `anyOf` is sent as null by Dify's converter.
            if "type" not in prop and "$ref" not in prop and "anyOf" not in prop:
                problems.append(f"{where}: property {name} has no type")
    return problems


# -- coze-studio (backend/crossdomain/plugin/model/openapi.go) -------------------------------------


def coze_violations(document: dict[str, Any]) -> list[str]:
    problems = []
    info = document.get("info", {})
    if not info.get("title") or not info.get("description"):
        problems.append("info.title and info.description are required")
    servers = document.get("servers", [])
    if len(servers) != 1:
        problems.append("exactly one server is allowed")
    elif not urlparse(servers[0]["url"]).netloc or len(servers[0]["url"]) > 512:
        problems.append(f"invalid server url {servers[0]['url']}")
    for path, method, operation in operations(document):
        where = f"{method.upper()} {path}"
        if not operation.get("operationId") or not operation.get("summary"):
            problems.append(f"{where}: operationId and summary are required")
        problems += [f"{where}: {p}" for p in coze_operation_violations(document, operation)]
    return problems


def coze_operation_violations(document: dict[str, Any], operation: dict[str, Any]) -> list[str]:
    problems = []
    if "requestBody" in operation:
        content = operation["requestBody"].get("content", {})
        if len(content) != 1 or not set(content) <= COZE_BODY_MEDIA:
            problems.append(f"request body needs exactly one supported media type, not {sorted(content)}")
        elif resolve(document, next(iter(content.values()))["schema"]).get("type") != "object":
            problems.append("request body only supports 'object' type")
        else:
            problems += untyped(document, body_schema(document, operation) or {}, "body")
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        if parameter.get("in") == "body" or schema.get("type") in (None, "object") or \
                (parameter["in"] == "path" and schema.get("type") == "array"):
            problems.append(f"parameter {parameter['name']}: location/type not allowed")
    responses = operation.get("responses", {})
    if "200" not in responses or not set(responses) <= {"200", "default"}:
        problems.append(f"responses must be '200' (+ default), not {sorted(responses)}")
    else:
        content = responses["200"].get("content", {})
        if set(content) != {"application/json"}:
            problems.append("200 response must be application/json only")
        elif resolve(document, content["application/json"]["schema"]).get("type") != "object":
            problems.append("200 response body must be an object")
    return problems


def untyped(document: dict[str, Any], schema: dict[str, Any], where: str, depth: int = 0) -> list[str]:
    """Return body schemas coze's parameter conversion rejects: no concrete type, or an array without items."""
    schema = resolve(document, schema)
    if schema.get("type") not in COZE_TYPES:
        return [f"{where}: unsupported json type {schema.get('type')!r}"]
    if depth > 12:
        return []
    if schema["type"] == "array":
        if "items" not in schema:
            return [f"{where}: array without items"]
        return untyped(document, schema["items"], f"{where}[]", depth + 1)
    problems = []
    for name, prop in schema.get("properties", {}).items():
        problems += untyped(document, prop, f"{where}.{name}", depth + 1)
    return problems


# -- tests -------------------------------------------------------------------------------------------


def test_documents_are_valid_openapi_30(live_server: LiveServer) -> None:
    for name, document in documents(live_server).items():
        assert document["openapi"].startswith("3.0."), name
        try:
            validate(document)
        except OpenAPIValidationError as error:
            pytest.fail(f"{name}: {error}")


def test_documents_map_cleanly_into_dify_custom_tools(live_server: LiveServer) -> None:
    for name, document in documents(live_server).items():
        assert dify_violations(document) == [], name


def test_documents_pass_coze_studio_rules(live_server: LiveServer) -> None:
    for name, document in documents(live_server).items():
        assert coze_violations(document) == [], name


def test_the_rule_checks_catch_what_the_platforms_reject(live_server: LiveServer) -> None:
    document = documents(live_server)["coze/openapi.yaml"]
    broken = json.loads(json.dumps(document))
    broken["servers"].append({"url": "https://second.example.com"})
    operation = broken["paths"]["/v1/nodes/compact"]["post"]
    operation["responses"]["422"] = operation["responses"]["default"]
    del operation["summary"]
    request = broken["components"]["schemas"]["CompactRequest"]["properties"]
    request["llm"].pop("type")
    problems = coze_violations(broken)
    assert any("one server" in p for p in problems) and any("'200'" in p for p in problems)
    assert any("summary" in p for p in problems) and any("body.llm" in p for p in problems)
    assert any("llm has no type" in p for p in dify_violations(broken))


def test_the_coze_file_is_ready_to_import() -> None:
    document = yaml.safe_load((COZE_DIR / "openapi.yaml").read_text(encoding="utf-8"))
    assert sorted(op["operationId"] for _, _, op in operations(document)) == sorted(TOOL_NODES)
    host = urlparse(document["servers"][0]["url"]).hostname or ""
    assert not re.match(r"^[\d.]+$", host), "Coze takes no IP address as a plugin URL"
    assert len({path.rsplit("/", 1)[0] for path in document["paths"]}) == 1, "one shared path prefix"


def test_coze_manifest_passes_coze_studio_rules() -> None:
    manifest = json.loads((COZE_DIR / "ai_plugin.json").read_text(encoding="utf-8"))
    assert manifest["schema_version"] == "v1"
    assert all(manifest[k] for k in ("name_for_model", "name_for_human", "description_for_model",
                                     "description_for_human"))
    assert manifest["api"]["type"] == "openapi"
    auth = manifest["auth"]
    assert (auth["type"], auth["sub_type"]) == ("service_http", "token/api_key")
    payload = json.loads(auth["payload"])
    assert payload["key"] == "Authorization" and payload["service_token"].startswith("Bearer ")
    assert payload["location"].lower() in ("header", "query")
    assert set(manifest["common_params"]) <= {"header", "query", "path", "body"}


def json_string_samples() -> dict[str, Any]:
    message = [{"role": "user", "content": "hello"}]
    return {"messages": message, "items": [{"kind": "fact", "content": "x"}], "kinds": ["fact"],
            "scopes": ["session"], "memories": ["a memory"], "knowledge": ["a fact"], "probes": ["ORD-1"],
            "llm_replies": []}


def test_server_accepts_objects_and_lists_as_json_strings(live_server: LiveServer) -> None:
    """Every object- or array-typed top-level body property of a tool also takes a JSON string of its value."""
    document = documents(live_server)["schemas/openapi.json"]
    samples = json_string_samples()
    refused = []
    for path, _, operation in operations(document):
        node = path.rsplit("/", 1)[-1]
        if node not in TOOL_NODES:
            continue
        schema = body_schema(document, operation) or {}
        for name, prop in schema["properties"].items():
            if resolve(document, prop).get("type") not in ("object", "array"):
                continue
            body: dict[str, Any] = {"agent_id": "json-strings", "session_id": f"s-{node}", "messages": samples[
                "messages"]} if "agent_id" in schema["properties"] else {"messages": samples["messages"]}
            body = {k: v for k, v in body.items() if k in schema["properties"]}
            body[name] = json.dumps(samples.get(name, {}))
            response = live_server.post(node, body)
            errors = response.json().get("errors", []) if response.status_code == 422 else []
            refused += [f"{node}.{name}: {e}" for e in errors if e.startswith((f"{name}:", f"{name}."))]
    assert refused == [], "\n".join(refused)


def test_coze_code_node_snippet_runs_against_the_server(live_server: LiveServer) -> None:
    live_server.post("memory_write", {"agent_id": "coze-bot", "session_id": "coze-1", "items": [
        {"kind": "identity", "content": "用户是企业版客户，工号 E-2231"}]}).raise_for_status()
    params = {"base_url": live_server.base_url, "api_key": live_server.api_key, "agent_id": "coze-bot",
              "session_id": "coze-1", "user_input": "我的工号是多少？", "system_prompt": "你是企业助手。"}
    result = run_py312("run_coze_code.py", str(COZE_DIR / "code_node.py"), json.dumps(params, ensure_ascii=False))
    assert set(result) == {"system_text", "prompt", "memory_text", "messages_json", "total_tokens"}
    assert "E-2231" in result["memory_text"] and result["system_text"].startswith("你是企业助手。")
    assert json.loads(result["messages_json"])[-1]["content"] == "我的工号是多少？"
    assert isinstance(result["total_tokens"], int) and result["total_tokens"] <= 4000


def test_openapi_mentions_no_placeholder_files() -> None:
    # The generated Coze file tells users to replace the example domain; nothing else may point at it.
    assert "acn.example.com" not in Path(ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8")
