"""The README documents every setting and every node, and keeps the two quick-start commands."""

from __future__ import annotations

import json
import re

from acn.app.openapi import ROOT
from acn.common.settings import Settings
from acn.nodes import all_nodes

README = (ROOT / "README.md").read_text(encoding="utf-8")
# Settings may be documented in the README or in a user guide beside it (docs/PROVIDERS.md).
SETTINGS_DOCS = README + "".join(path.read_text(encoding="utf-8") for path in sorted((ROOT / "docs").glob("*.md")))


def test_every_setting_is_documented() -> None:
    missing = [f"ACN_{name.upper()}" for name in Settings.model_fields
               if f"`ACN_{name.upper()}`" not in SETTINGS_DOCS]
    assert missing == []


def test_every_node_is_documented() -> None:
    missing = [name for name in all_nodes() if f"`{name}`" not in README]
    assert missing == []


def test_quick_start_is_two_commands_and_ci_runs_the_test_one() -> None:
    quick = README.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in quick.strip().splitlines()]
    assert commands == ["make run", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^make test$", ci, re.MULTILINE)
    assert "## 中文快速上手" in README


def test_the_version_has_one_source() -> None:
    """pyproject reads common.pack.VERSION; manifest.yaml and the OpenAPI document are generated from it."""
    import tomllib

    import yaml

    from acn.common.pack import VERSION

    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "acn.common.pack.VERSION"}
    assert yaml.safe_load((ROOT / "manifest.yaml").read_text(encoding="utf-8"))["version"] == VERSION
    openapi = json.loads((ROOT / "schemas" / "openapi.json").read_text(encoding="utf-8"))
    assert openapi["info"]["version"] == VERSION
