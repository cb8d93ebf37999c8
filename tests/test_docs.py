"""The README stays a short start page; docs/ documents every setting (generated) and every node; links resolve."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import Field

from acn.app.openapi import ROOT
from acn.app.settings_doc import configuration_markdown
from acn.common.settings import SECTIONS, Settings
from acn.common.settings_sections.store import StoreSettings
from acn.nodes import all_nodes

README = (ROOT / "README.md").read_text(encoding="utf-8")
CONFIGURATION = ROOT / "docs" / "configuration.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readme_is_a_start_page() -> None:
    """Issue 30: what it is, the two commands, one exchange, links; the rest lives in docs/."""
    assert len(README.splitlines()) <= 250


def test_the_configuration_doc_is_generated_from_settings() -> None:
    assert all(field.description for field in Settings.model_fields.values())
    text = CONFIGURATION.read_text(encoding="utf-8")
    assert text == configuration_markdown(), "regenerate with `python -m acn.app.generate`"
    missing = [f"ACN_{name.upper()}" for name in Settings.model_fields if f"| `ACN_{name.upper()}` |" not in text]
    assert missing == []


def test_a_setting_added_without_regenerating_makes_the_configuration_doc_stale() -> None:
    class WithOneMore(StoreSettings):
        brand_new_knob: int = Field(default=3, ge=1, description="A setting the committed doc has never seen.")

    text = configuration_markdown((("Store", WithOneMore), *SECTIONS[1:]))
    assert "| `ACN_BRAND_NEW_KNOB` | `3` | integer, ≥ 1 | A setting the committed doc has never seen. |" in text
    assert text != CONFIGURATION.read_text(encoding="utf-8")


def test_settings_are_its_sections_and_the_doc_lists_them_by_section() -> None:
    """Issue 51: every field sits in exactly one section, and the doc shows it under that section's heading."""
    by_section = [name for _, section in SECTIONS for name in section.model_fields]
    assert by_section == list(Settings.model_fields)
    assert [title for title, _ in SECTIONS] == ["Store", "Retrieval", "Compaction", "Providers", "Serving", "Security"]
    text = CONFIGURATION.read_text(encoding="utf-8")
    for title, section in SECTIONS:
        part = text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]
        assert [f"ACN_{name.upper()}" for name in section.model_fields] == re.findall(r"^\| `(ACN_\w+)` \|", part, re.M)


def test_every_node_is_documented() -> None:
    api = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in all_nodes() if f"| `{name}` |" not in api]
    assert missing == []


def _anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(encoding="utf-8"), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}


def test_every_internal_link_resolves() -> None:
    broken = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path_part, _, anchor = target.partition("#")
            linked = (page.parent / path_part).resolve() if path_part else page
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in _anchors(linked)):
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


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
