"""bench/assemble_replay.py on a tiny state: a replay in a new process times every assemble asked, on a copy of the
state (which it leaves as it was), and --compare's table has a ratio per round.

Behaviour, not timings (the figures are in bench/results/long-session.md).
"""

from __future__ import annotations

from pathlib import Path

from bench.assemble_replay import build, replay_in, rounds_table


def test_a_replay_times_each_assemble_and_leaves_the_state_as_it_was(tmp_path: Path) -> None:
    state = tmp_path / "turn-25"
    build("none", 25, state)
    files = sorted((path.relative_to(state), path.stat().st_size) for path in state.rglob("*") if path.is_file())
    timings = replay_in(Path.cwd(), "none", state, 26, 5)
    assert len(timings) == 5 and all(ms > 0 for ms in timings)
    assert sorted((path.relative_to(state), path.stat().st_size) for path in state.rglob("*")
                  if path.is_file()) == files


def test_the_table_has_a_ratio_per_round_beside_another_checkout() -> None:
    table = rounds_table("none", [22], 3, 2, Path.cwd())
    row = table.splitlines()[-1].split(" | ")
    assert row[0] == "| 22" and len(row[3].strip(" |").split()) == 2
