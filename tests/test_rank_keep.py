"""score_all(keep=…) leaves out only candidates that cannot be among the best `keep` (rank.kept_rows)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from acn.common.models import Memory
from acn.retrieval.hybrid_rank import SCORE_STEP, kept_rows, score_all
from acn.storage.database.memory_rows import Scored


def _scored(rng: random.Random, index: int) -> Scored:
    # Few distinct values: many candidates tie after rounding, and ties are broken by age.
    memory = Memory(id=f"m{index}", kind=rng.choice(["turn", "fact"]), content=rng.choice(["咖啡", "茶 咖啡", "tea"]),
                    scope="session", agent_id="a", session_id="s", created_at=0,
                    updated_at=rng.choice([0, 1000, 2000]), version=1, importance=rng.choice([3.0, 5.0]))
    bm25_rank = rng.choice([None, 1, 2, 3])
    dense_rank = rng.choice([None, 1, 2])
    return Scored(memory, bm25=rng.choice([0.0, 1.5, 3.0]) if bm25_rank else 0.0, bm25_rank=bm25_rank,
                  dense=0.5 if dense_rank else 0.0, dense_rank=dense_rank)


def _order(ranked: list) -> list[tuple[str, float]]:
    ordered = sorted(ranked, key=lambda r: (r.score, r.memory.updated_at), reverse=True)
    return [(r.memory.id, r.score) for r in ordered]


@pytest.mark.parametrize("seed", range(20))
def test_the_best_keep_are_those_of_the_whole_list(seed: int) -> None:
    rng = random.Random(seed)
    candidates = [_scored(rng, i) for i in range(rng.randint(30, 120))]
    whole = _order(score_all(candidates, 24.0, 5000.0, "咖啡"))
    for keep in (1, 5, 20, len(candidates) - 1):
        kept = score_all(candidates, 24.0, 5000.0, "咖啡", keep=keep)
        assert _order(kept)[:keep] == whole[:keep]
        if whole[keep - 1][1] - whole[-1][1] > 3 * SCORE_STEP:  # the weakest cannot be among the best keep
            assert len(kept) < len(candidates)


def test_kept_rows_leaves_out_only_what_rounds_strictly_below() -> None:
    score = np.array([0.9, 0.50004, 0.5, 0.49996, 0.4997, 0.1])
    assert kept_rows(score, 2).tolist() == [0, 1, 2, 3]  # 0.5 and 0.49996 both round to 0.5 (keep-th: 0.50004)
    assert kept_rows(score, 6) is None
    assert kept_rows(np.array([0.3, float("nan"), 0.2]), 1) is None  # a bad score: nothing left out
