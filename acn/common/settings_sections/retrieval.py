"""The retrieval section of `Settings` (acn/common/settings.py composes the sections)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from acn.common.models import StrictModel


class RetrievalSettings(StrictModel):
    """How memories are ranked when they are read back."""

    ranker: Literal["off", "learned"] = Field(
        default="learned",
        description="How focused `assemble` orders its recall candidates. `learned`: the small tree model shipped "
                    "in the package (acn/retrieval/ranker_model.json, trained by `python -m bench.train_ranker` on "
                    "the dev halves of bench.recall; see [ranker.md](ranker.md)) reorders the candidates that pass the "
                    "score floor; where it has no model (BM25 only), or its file is missing or invalid, the "
                    "hand-tuned fusion order stays. `off`: always the hand-tuned order.",
    )
    rerank_top_n: int = Field(
        default=30, ge=1, le=1000,
        description="How many of the best fused candidates ACN_RERANK_URL reorders (the rest keep their place "
                    "after them): each is a document the reranker reads, so the call's cost grows with it.",
    )
    recency_half_life_hours: float = Field(
        default=72.0, gt=0, description="Half-life of the recency decay used in memory ranking."
    )
