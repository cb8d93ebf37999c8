"""Generated files are in sync with the models; the manifest and OpenAPI document are complete."""

from __future__ import annotations

import json

import yaml
from flask.testing import FlaskClient

from acn.app.generate import stale_files
from acn.app.openapi import ROOT, build_openapi
from acn.nodes import all_nodes


def test_generated_files_are_up_to_date() -> None:
    stale = stale_files(all_nodes())
    assert stale == [], f"regenerate with `python -m acn.app.generate`: {stale}"


def test_served_openapi_equals_the_file_except_server_url(client: FlaskClient) -> None:
    served = client.get("/openapi.json").get_json()
    on_disk = json.loads((ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8"))
    assert served["servers"] == [{"url": "http://localhost"}]
    served["servers"] = on_disk["servers"]
    assert served == on_disk


def test_manifest_lists_every_node_with_existing_schema_files(client: FlaskClient) -> None:
    manifest = yaml.safe_load((ROOT / "manifest.yaml").read_text(encoding="utf-8"))
    assert manifest == client.get("/v1/manifest").get_json()
    assert [n["name"] for n in manifest["nodes"]] == list(all_nodes())
    for node in manifest["nodes"]:
        for key in ("request_schema", "response_schema"):
            schema = json.loads((ROOT / node[key]).read_text(encoding="utf-8"))
            assert schema["type"] == "object"
        for audience in ("human", "llm"):
            assert node["description"][audience]["en_US"] and node["description"][audience]["zh_Hans"]


def test_openapi_operations_have_ids_and_summaries() -> None:
    document = build_openapi(all_nodes())
    assert document["openapi"].startswith("3.0.")
    assert len(document["servers"]) == 1
    operations = [op for path in document["paths"].values() for op in path.values()]
    ids = [op["operationId"] for op in operations]
    assert len(ids) == len(set(ids))
    assert all(op["summary"] for op in operations)
    text = json.dumps(document)
    assert '"const"' not in text and '"$defs"' not in text and '{"type": "null"}' not in text
