"""bench/plateau.py on a tiny run: every phase is measured for both kinds of chat, and the functions it times are
put back afterwards.

Behaviour, not timings (the figures are in bench/results/plateau.md).
"""

from __future__ import annotations

import acn.assembly.assemble as assemble_module
import acn.recording.record_turn as record_module
from acn.storage.repositories.sessions import SessionRepository
from bench.plateau import OTHER, PHASES, REQUEST, side_by_side, table


def test_the_plateau_bench_times_every_phase_of_both_kinds_and_restores_them() -> None:
    originals = (assemble_module.layer_candidates, record_module.maybe_compact, SessionRepository.commit)
    clock = side_by_side(chats=1, old=3, young=2, steps=2, embedder="none")
    for kind in ("young", "old"):
        for label, _, _ in PHASES:
            assert clock.spent[(kind, label)] > 0, (kind, label)
        assert clock.spent[(kind, REQUEST)] > sum(clock.spent[(kind, label)] for label, _, _ in PHASES)
        assert (kind, OTHER) in clock.spent
    assert (assemble_module.layer_candidates, record_module.maybe_compact, SessionRepository.commit) == originals
    text = table(clock, 2, 1, 3, 2, 2, "none")
    assert all(f"| {label} |" in text for label, _, _ in PHASES) and "Young / old CPU a turn: **" in text
