"""bench/perf.py on tiny sizes: every row of the report is there and every figure is a positive number.

Behaviour, not timings: targets may be met or not; this only checks the benchmark measures what issue 8 lists.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from bench.perf import MEM0, Config, Report, Row, cells, run

TINY = Config(sizes=(80,), retrieve_calls=3, edit_calls=2, write_calls=2, batch_calls=2, batch_size=5, record_turns=4,
              assemble_calls=2, compact_calls=2, scaling_turns=(2, 4), scaling_probes=2, cold_starts=1,
              command="test")
NODES = ["memory_retrieve", "record_turn", "assemble", "compact", "edit_context", "memory_write ×1", "memory_write ×5"]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    return run(TINY, Path(tmp_path_factory.mktemp("perf")))


def find(report: Report, section: str, name: str, via: str, scale: str) -> Row:
    matches = [r for r in report.rows if (r.section, r.name, r.via, r.scale) == (section, name, via, scale)]
    assert len(matches) == 1, f"{section} / {name} / {via} / {scale}: {len(matches)} rows"
    return matches[0]


def test_every_node_is_measured_in_process_and_over_http(report: Report) -> None:
    for via in ("in-process", "HTTP"):
        for node in NODES:
            row = find(report, "nodes", node, via, "80")
            assert len(row.times) > 0
    assert find(report, "nodes", "memory_write ×5", "HTTP", "80").items == 5


def test_store_floor_scaling_and_cold_start_rows(report: Report) -> None:
    find(report, "store", "bare pymilvus BM25", "pymilvus", "80")
    overhead = find(report, "store", "memory_retrieve above the store's search", "in-process", "80")
    assert overhead.value is not None and math.isfinite(overhead.value)
    for turns in ("2 turns", "4 turns"):
        for name in ("assemble", "record_turn", "full history + tiktoken"):
            assert find(report, "scaling", name, "in-process", turns).times
    for name in ("assemble", "record_turn", "full history + tiktoken"):
        ratio = find(report, "scaling", f"{name} t(4)/t(2)", "in-process", "2→4 turns")
        assert ratio.value is not None and ratio.value > 0
    for store in ("80", "empty", "empty, use embedder"):
        for name in ("launch → first /healthz", "launch → first memory_retrieve"):
            assert find(report, "cold start", name, "python server.py", store).times
    # The start that builds the model cache is reported on its own, without a target.
    building = find(report, "cold start", "launch → first memory_retrieve", "python server.py",
                    "empty, use embedder, first start")
    assert len(building.times) == 1 and building.target is None


def test_every_figure_is_positive_and_every_target_has_a_verdict(report: Report) -> None:
    for row in report.rows:
        if row.value is None:
            assert row.times and all(t > 0 for t in row.times), row.name
            assert 0 < row.p50 <= row.p95, row.name
            assert row.throughput > 0 or row.items == 0, row.name
        if row.target is not None:
            assert row.status in ("met", "**not met**")
    assert {r.target.text for r in report.rows if r.target} >= {"p95 ≤ 30 ms", "≥ 1,000 items/s", "ratio ≤ 1.5",
                                                                 "≤ 3 s"}


def test_markdown_has_every_table_and_row(report: Report) -> None:
    text = report.markdown()
    for heading in ("## Targets (issue 8)", "## Nodes", "## Store floor", "## Scaling with session length",
                    "## Cold start", "## Quoted for orientation, not measured here"):
        assert heading in text
    for row in report.rows:
        assert "| " + " | ".join(cells(row)) + " |" in text
    for what, figure, _ in MEM0:
        assert what in text and figure in text


def test_http_rows_carry_the_server_time_of_each_timed_call(report: Report) -> None:
    for node in NODES:
        http = find(report, "nodes", node, "HTTP", "80")
        assert len(http.server) == len(http.times), node
        assert all(0 < server <= total for server, total in zip(http.server, http.times, strict=True)), node
        assert "(server " in cells(http)[0]
        assert find(report, "nodes", node, "in-process", "80").server == []
