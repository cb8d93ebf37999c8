"""bench/peer.py, our side only, at a tiny size: every figure of the peer table is measured and sane.

mem0 runs in its own environment (.venv-mem0), which is not part of `make test`: here its column is built from
given figures, to check the ratios; the real mem0 side is exercised by `python -m bench.peer`.
Structure, not timings.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench import locomo
from bench.peer import (
    MEM0_NAME,
    METRICS,
    Config,
    Report,
    Run,
    Shape,
    locomo_ours,
    parse_shapes,
    render,
    run,
    tree_rss_mb,
)

TINY = Config(shapes=(Shape(30), Shape(30, 3)), rounds=1, searches=4, ours=("none",), mem0=False, locomo=(),
              command="test")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return run(TINY, Path(tmp_path_factory.mktemp("peer")))


def test_every_shape_is_written_restarted_searched_and_weighed(report: Report) -> None:
    assert report.systems == ["ours, BM25"]
    for shape in TINY.shapes:
        (measured,) = report.runs[(shape.name, "ours, BM25")]
        assert measured.items == 30
        assert len(measured.write_ms) == shape.namespaces  # 10 or 30 per namespace: one call each
        assert measured.write_rate > 0
        assert len(measured.search_ms) == TINY.searches  # one more question is the first search, timed apart
        assert all(ms > 0 for ms in measured.search_ms)
        assert 0 < measured.first_search_ms < measured.cold_ms
        assert measured.rss_mb > 20  # a Python server and Milvus Lite's process
        assert measured.disk_mb > 0


def test_the_table_has_every_measurement_of_every_shape(report: Report) -> None:
    text = render(report)
    for shape in TINY.shapes:
        assert f"## {shape.name}" in text
    for metric in METRICS:
        assert text.count(f"| {metric.name} ({metric.unit}) |") == len(TINY.shapes)
    assert "pymilvus" in text and "milvus-lite" in text


def test_ratios_are_ours_over_mem0() -> None:
    shape = Shape(100)
    ours = Run(write_ms=[50.0], items=100, first_search_ms=10, cold_ms=1_000, search_ms=[2.0, 4.0], rss_mb=300,
               disk_mb=2)
    peer = Run(write_ms=[500.0], items=100, first_search_ms=20, cold_ms=4_000, search_ms=[8.0, 8.0], rss_mb=600,
               disk_mb=4)
    report = Report(Config(shapes=(shape,), locomo=(0,)), ["ours, BM25", MEM0_NAME],
                    {(shape.name, "ours, BM25"): [ours], (shape.name, MEM0_NAME): [peer]},
                    {"ours, BM25": (7, 10), MEM0_NAME: (35, 100)})
    text = render(report)
    assert "| mem0 | ours, BM25 |" in text  # the peer first
    assert "| memory_write, 100 per call (items/s) | 200 | 2,000 (10.00×) |" in text
    assert "| search p95 (ms) | 8.0 | 4.0 (0.50×) |" in text
    assert "| cold start → first answer (ms) | 4,000 | 1,000 (0.25×) |" in text
    assert "| ours, BM25 | 7 | 10 | 70.0% | 2.00× |" in text


def test_a_write_only_run_shows_writes_and_disk_and_dashes_for_the_rest() -> None:
    # --write-only (a 100k run of mem0): no restart and no searches, so no figure for them, and no crash.
    shape = Shape(100)
    ours, peer = Run(write_ms=[50.0], items=100, disk_mb=2), Run(write_ms=[500.0], items=100, disk_mb=4)
    report = Report(Config(shapes=(shape,), locomo=(), write_only=True), ["ours, BM25", MEM0_NAME],
                    {(shape.name, "ours, BM25"): [ours], (shape.name, MEM0_NAME): [peer]}, {})
    text = render(report)
    assert "| memory_write, 100 per call (items/s) | 200 | 2,000 (10.00×) |" in text
    assert "| search p50 (ms) | — | — |" in text
    assert "| first search after a restart (ms) | — | — |" in text
    assert "| disk (MB) | 4.0 | 2.0 (0.50×) |" in text


def test_locomo_hits_when_an_evidence_message_is_in_the_top_ten(tmp_path: Path) -> None:
    lines = [locomo.Line(f"D1:{i}", "Ann" if i % 2 else "Bob", "user" if i % 2 else "assistant", text, 1, "")
             for i, text in enumerate(["I adopted a corgi named Biscuit", "Lovely! I bought a red kayak",
                                       "We went hiking near Zermatt", "My sister plays the oboe"], start=1)]
    questions = [locomo.Question("What is the name of Ann's corgi?", "4", ["D1:1"], "Biscuit"),
                 locomo.Question("What instrument does the sister play, the oboe?", "4", ["D1:4"], "oboe"),
                 locomo.Question("Which colour is the kayak?", "4", ["D9:9"], None)]  # evidence never stored
    hits, asked = locomo_ours([locomo.Conversation("t1", lines, questions)], "none", tmp_path, tmp_path / "cache")
    assert (hits, asked) == (2, 3)


def test_shapes_and_process_memory() -> None:
    assert parse_shapes("1000,10000", "10000x100") == (Shape(1_000), Shape(10_000), Shape(10_000, 100))
    assert parse_shapes("", "") == ()
    assert tree_rss_mb(os.getpid()) > 1
