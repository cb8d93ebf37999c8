"""bench/user_cost.py on a tiny store: every figure is measured and the latest phone is answered everywhere.

Behaviour, not timings (the figures are in bench/results/user_cost.md).
"""

from __future__ import annotations

from bench.user_cost import measure


def test_the_user_cost_bench_measures_every_column() -> None:
    row = measure(2, 3, 2, "none", lambda message: None)
    assert row["count"] == 2 and row["user_rows"] == 4  # two phones (one superseded), two preferences
    assert row["answers"] is True
    for column in ("warm", "warm_wall", "restart_first", "restart_first_wall", "restart_next", "restart_next_wall"):
        assert row[column] > 0, column
