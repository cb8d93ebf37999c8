"""What a Dify custom-tool import of our OpenAPI documents creates, and which URL the imported tools call.

`dify_tool_bundles` follows Dify's importer (api/core/tools/utils/parser.py,
ApiBasedToolSchemaParser.parse_openapi_to_tool_bundle): every operation of every path, in the order get, post,
put, delete, patch, head, options, trace, becomes one tool, named by its operationId (or `<path>_<method>`
with the path's characters outside [a-zA-Z0-9_-] removed), calling servers[0].url + path, with the query/path
parameters and the request body's top-level properties as inputs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.common.errors import ConfigurationError
from acn.nodes import all_nodes
from acn.server import create_app
from tests.conftest import ROOT, make_settings

DIFY_METHODS = ("get", "post", "put", "delete", "patch", "head", "options", "trace")
ADMIN_OPERATIONS = {"memory_list", "memory_delete_namespace", "memory_get", "memory_delete", "memory_import"}


def dify_tool_bundles(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the tools Dify creates from an OpenAPI document: operation id, method, URL and input names."""
    if not document["servers"]:
        raise ValueError("No server found in the openapi yaml.")
    server_url = document["servers"][0]["url"]
    tools = []
    for path, item in document["paths"].items():
        for method in (m for m in DIFY_METHODS if m in item):
            operation = item[method]
            inputs = [parameter["name"] for parameter in operation.get("parameters", [])]
            for content in operation.get("requestBody", {}).get("content", {}).values():
                schema = content.get("schema", {})
                if "$ref" in schema:  # one reference, resolved from the document's root, as Dify does
                    target: Any = document
                    for part in schema["$ref"].split("/")[1:]:
                        target = target[part]
                    schema = target
                inputs += list(schema.get("properties", {}))
            operation_id = operation.get("operationId") or \
                f"{re.sub(r'[^a-zA-Z0-9_-]', '', path.removeprefix('/'))}_{method}"
            tools.append({"operation_id": operation_id, "method": method, "url": server_url + path,
                          "inputs": inputs})
    return tools


def test_the_importer_model_finds_every_operation() -> None:
    # The model above must see admin operations when a document has them (else the next test proves nothing).
    document = {"servers": [{"url": "http://x"}], "paths": {
        "/v1/memories": {"get": {"operationId": "memory_list"}, "delete": {}},
        "/v1/nodes/assemble": {"post": {"operationId": "assemble", "requestBody": {"content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/A"}}}}}}},
        "components": {"schemas": {"A": {"type": "object", "properties": {"agent_id": {"type": "string"}}}}}}
    tools = dify_tool_bundles(document)
    assert [t["operation_id"] for t in tools] == ["memory_list", "v1memories_delete", "assemble"]
    assert tools[2]["inputs"] == ["agent_id"]


def test_importing_the_openapi_document_creates_node_tools_only(client: FlaskClient) -> None:
    nodes = set(all_nodes())
    served = client.get("/openapi.json").get_json()
    on_disk = json.loads((ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8"))
    for document in (served, on_disk):
        tools = dify_tool_bundles(document)
        assert {t["operation_id"] for t in tools} == nodes
        assert {t["method"] for t in tools} == {"post"}
        assert all("/v1/nodes/" in t["url"] for t in tools)
        assert all(t["inputs"] for t in tools)


def test_the_admin_document_holds_the_administration_routes(client: FlaskClient) -> None:
    served = client.get("/openapi-admin.json")
    assert served.status_code == 200
    on_disk = json.loads((ROOT / "schemas" / "openapi-admin.json").read_text(encoding="utf-8"))
    for document in (served.get_json(), on_disk):
        assert {t["operation_id"] for t in dify_tool_bundles(document)} == ADMIN_OPERATIONS
        assert not any(path.startswith("/v1/nodes/") for path in document["paths"])


@pytest.fixture(scope="module")
def proxied_app(tmp_path_factory: pytest.TempPathFactory) -> Flask:
    application = create_app(make_settings(tmp_path_factory.mktemp("proxied"), trusted_proxies="10.0.0.1, fd00::/8",
                                           allowed_hosts="localhost,acn.example.com"))
    yield application
    application.extensions["acn"].close()


FORWARDED = {"X-Forwarded-Proto": "https", "X-Forwarded-Host": "acn.example.com", "X-Forwarded-For": "203.0.113.9"}


def server_url(app: Flask, peer: str, headers: dict[str, str]) -> str:
    response = app.test_client().get("/openapi.json", headers=headers, environ_base={"REMOTE_ADDR": peer})
    assert response.status_code == 200, response.get_data(as_text=True)
    return str(response.get_json()["servers"][0]["url"])


def test_forwarded_headers_count_only_from_a_listed_proxy(proxied_app: Flask) -> None:
    assert server_url(proxied_app, "10.0.0.1", FORWARDED) == "https://acn.example.com"
    assert server_url(proxied_app, "fd00::5", FORWARDED) == "https://acn.example.com"
    # Anyone else's X-Forwarded-* headers are ignored: the URL is the request's own.
    assert server_url(proxied_app, "10.0.0.2", FORWARDED) == "http://localhost"
    assert server_url(proxied_app, "127.0.0.1", FORWARDED) == "http://localhost"


def test_forwarded_headers_are_ignored_when_no_proxy_is_listed(client: FlaskClient) -> None:
    response = client.get("/openapi.json", headers=FORWARDED, environ_base={"REMOTE_ADDR": "10.0.0.1"})
    assert response.get_json()["servers"] == [{"url": "http://localhost"}]


def test_the_public_url_setting_names_the_server(tmp_path: Path) -> None:
    application = create_app(make_settings(tmp_path, public_url="https://acn.example.com/base/"))
    try:
        for path in ("/openapi.json", "/openapi-admin.json"):
            document = application.test_client().get(path).get_json()
            assert document["servers"] == [{"url": "https://acn.example.com/base"}]
    finally:
        application.extensions["acn"].close()


def test_a_malformed_proxy_list_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="ACN_TRUSTED_PROXIES"):
        create_app(make_settings(tmp_path, trusted_proxies="10.0.0.1,proxy.example.com"))
