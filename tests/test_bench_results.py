"""bench/results/ holds one current file per benchmark, each linked from docs/benchmarks.md (issue 51).

Earlier runs are git's history, not files beside the current one; a link to bench/results/ from any page resolves.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
BENCHMARKS = ROOT / "docs" / "benchmarks.md"
LINK = re.compile(r"\]\(([^)\s#]+)")


def results_linked(page: Path, results: Path = RESULTS) -> set[str]:
    """Return the files of `results` a page links to, by name, whether they exist or not."""
    targets = {(page.parent / link).resolve() for link in LINK.findall(page.read_text(encoding="utf-8"))}
    return {target.name for target in targets if target.parent == results.resolve()}


def pages() -> list[Path]:
    """Every page that may link to a result: the README, RELIABILITY.md, docs/ and the results themselves."""
    return [ROOT / "README.md", ROOT / "RELIABILITY.md", *sorted((ROOT / "docs").glob("*.md")),
            *sorted(RESULTS.glob("*.md"))]


def test_every_result_file_is_linked_from_the_benchmarks_page() -> None:
    present = {path.name for path in RESULTS.iterdir() if path.is_file()}
    assert present, "bench/results/ is empty: the page has nothing to stand on"
    assert sorted(present - results_linked(BENCHMARKS)) == []


def test_every_link_to_a_result_resolves() -> None:
    broken = {page.relative_to(ROOT).as_posix(): sorted(name for name in results_linked(page)
                                                        if not (RESULTS / name).is_file())
              for page in pages()}
    assert {page: names for page, names in broken.items() if names} == {}


def test_results_hold_no_images() -> None:
    """Screenshots belong to the docs that show them (docs/images/), not to the benchmark results."""
    assert sorted(path.name for path in RESULTS.iterdir() if path.suffix != ".md") == []


def test_the_link_reader_sees_a_missing_and_a_present_result(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "x.md"
    page.parent.mkdir()
    page.write_text("[a](../bench/results/peer.md) [b](../bench/results/gone.md#x) [c](other.md) [d](https://x/y.md)",
                    encoding="utf-8")
    assert results_linked(page, tmp_path / "bench" / "results") == {"peer.md", "gone.md"}
