"""What the Dify files claim: the minimum Dify version, tool outputs that no daemon refuses, DSL files that name the
DSL version and the plugins they need, and the signing steps a self-hoster must follow."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from acn.integrations.generate import AUTHOR, PLUGIN_DIR, PLUGIN_NAME, RESERVED_OUTPUTS
from tests.conftest import ROOT

EXAMPLES = ROOT / "examples" / "dify"
# Dify's constants/dsl_version.py at the releases whose workflow engine is graphon (0.8.0 runs these tests).
DSL_VERSION = "0.6.0"
# dify-plugin-daemon's PluginUniqueIdentifier: author/name:version, then an optional @checksum.
IDENTIFIER = re.compile(r"^[a-z0-9_-]{1,64}/[a-z0-9_-]{1,255}:\d{1,4}(\.\d{1,4}){1,3}(-\w{1,16})?(@[a-f0-9]{32,64})?$")


def test_no_tool_declares_an_output_named_like_a_built_in_one() -> None:
    for path in sorted((PLUGIN_DIR / "tools").glob("*.yaml")):
        properties = yaml.safe_load(path.read_text(encoding="utf-8")).get("output_schema", {}).get("properties", {})
        assert not RESERVED_OUTPUTS & set(properties), path.name


def test_the_manifest_claims_dify_1_9() -> None:
    manifest = yaml.safe_load((PLUGIN_DIR / "manifest.yaml").read_text(encoding="utf-8"))
    assert manifest["meta"]["minimum_dify_version"] == "1.9.0"


def dependencies(path: Path) -> list[dict[str, object]]:
    return list(yaml.safe_load(path.read_text(encoding="utf-8"))["dependencies"])


def test_dsl_files_name_their_version_and_the_plugins_they_use() -> None:
    for path in sorted(EXAMPLES.glob("*.yml")):
        text = path.read_text(encoding="utf-8")
        document = yaml.safe_load(text)
        assert document["version"] == DSL_VERSION, path.name
        needed = set()
        if "provider: langgenius/openai/openai" in text:
            needed.add("langgenius/openai")
        if f"provider_id: {AUTHOR}/{PLUGIN_NAME}/" in text:
            needed.add(f"{AUTHOR}/{PLUGIN_NAME}")
        declared = set()
        for dependency in dependencies(path):
            value = dependency["value"]
            assert isinstance(value, dict)
            kind = dependency["type"]
            identifier = value["marketplace_plugin_unique_identifier" if kind == "marketplace" else
                               "plugin_unique_identifier"]
            assert kind in ("marketplace", "package") and IDENTIFIER.match(str(identifier)), identifier
            declared.add(str(identifier).split(":")[0])
        assert declared == needed, path.name


def test_the_readmes_say_how_to_install_an_unsigned_plugin() -> None:
    for path in (ROOT / "docs" / "integration.md", PLUGIN_DIR / "README.md", ROOT / "docs" / "DEPLOYMENT.md"):
        text = path.read_text(encoding="utf-8")
        for needle in ("FORCE_VERIFYING_SIGNATURE=false", "dify signature sign",
                       "THIRD_PARTY_SIGNATURE_VERIFICATION_PUBLIC_KEYS"):
            assert needle in text, f"{path.name}: {needle}"
