"""bench/sessions_in_turn.py on a tiny run: a row per block of turns, with every chat's session held when the read
cache holds them all.

Behaviour, not timings (the figures are in bench/results/long-session.md).
"""

from __future__ import annotations

from bench.sessions_in_turn import served


def test_the_bench_reports_each_block_with_the_sessions_the_read_cache_holds() -> None:
    rows = served(chats=3, turns=4, read_cache_mb=64, embedder="none", every=2)
    assert [row.split(" | ")[0] for row in rows] == ["| 1–2", "| 3–4"]
    assert [row.split(" | ")[2] for row in rows] == ["3", "3"]  # three chats, three session indexes held
    assert all(float(row.split(" | ")[1].split(" / ")[0]) > 0 for row in rows)
