"""bench/user_cost.py on tiny stores: every figure is measured, every ratio taken, and the latest phone is answered
everywhere.

Behaviour, not timings (the figures are in bench/results/user_cost.md).
"""

from __future__ import annotations

from bench.user_cost import measure, report


def test_the_user_cost_bench_measures_every_column() -> None:
    result = measure([1, 2], 3, 2, 1, "none", lambda message: None)
    assert result["rows"] == [2, 4]  # one phone and one preference; two phones (one superseded), two preferences
    assert result["answers"] is True
    for kind in ("warm", "first", "next"):
        assert [len(runs) for runs in result[kind]] == ([1, 1] if kind == "first" else [2, 2]), kind
        assert all(run[0] > 0 and run[1] > 0 for runs in result[kind] for run in runs), kind
    text = report(result, "none", 3)
    assert text.count("median ratio 2 / 1") == 1 and "latest phone in every memory_text: yes" in text
