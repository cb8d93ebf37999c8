"""bench/scale.py on a tiny store: every row of the report is there and every figure is a positive number.

Behaviour, not timings: the issue's bounds may be met or not; this only checks the benchmark measures what issue 33
lists (write rate per step, RSS, disk, restart, each kind of first call beside its warm median).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from bench.scale import NODES, Config, markdown, run

TINY = Config(memories=2_000, sessions=4, namespace=500, batch=500, step=1_000, probes=2, warm_calls=2)


def test_the_scale_report_has_every_row(tmp_path: Path) -> None:
    report = run(TINY, tmp_path)
    assert [stored for stored, _ in report.rates] == [1_000, 2_000] and all(r > 0 for _, r in report.rates)
    assert len(report.cpu_per_k) == 2 and all(cpu > 0 for cpu in report.cpu_per_k)  # the server's, per step
    assert report.namespace_rate > 0 and report.disk_mb > 0
    assert 0 < report.healthy_ms <= report.ready_ms
    assert set(report.rss_mb) == {"after the fill", "after a restart, ready", "after a restart and the probes"}
    assert all(mb > 0 for mb in report.rss_mb.values())
    calls = {(when, call) for when, call, _, _ in report.firsts}
    for node in NODES:
        assert ("warm server", f"new session: {node}") in calls
        for label in ("existing session", "new session", "namespace of 500"):
            assert ("after a restart", f"{label}: {node}") in calls
    assert all(first > 0 and warm > 0 for _, _, first, warm in report.firsts)
    assert "| after a restart | new session: assemble |" in markdown(report, "test")


def test_with_an_embedder_rss_is_read_again_once_the_backlog_drained(tmp_path: Path) -> None:
    report = run(replace(TINY, embedder="hash", namespace=0), tmp_path)
    assert list(report.rss_mb) == ["after the fill", "after the fill, backlog drained", "after a restart, ready",
                                   "after a restart and the probes"]
