"""Budget ratios per layer, phase presets, and how a token budget is split between layers."""

from __future__ import annotations

from pydantic import Field, model_validator

from acn.common.models import StrictModel

# Fill order when one layer leaves budget unused: facts before chatter.
FLOW_ORDER = ("working", "memory", "history")


class BudgetRatios(StrictModel):
    """Share of max_tokens per layer (default 15 / 50 / 25 / 10: the recent turns carry most of a conversation)."""

    system: float = Field(default=0.15, ge=0, le=1, description="Identity / system prompt.")
    immediate: float = Field(default=0.50, ge=0, le=1, description="Recent turns and the user input.")
    working: float = Field(default=0.25, ge=0, le=1, description="Structured working state (segments).")
    persistent: float = Field(default=0.10, ge=0, le=1, description="Retrieved memories and knowledge.")

    @model_validator(mode="after")
    def _some_budget(self) -> BudgetRatios:
        if self.immediate + self.working + self.persistent <= 0:
            raise ValueError("immediate, working and persistent ratios cannot all be 0")
        return self


# While requirements are gathered the working state (what was decided) matters most; while executing, the
# recent turns; when closing, the long-term memory (what to carry into the next session).
PHASES: dict[str, BudgetRatios] = {
    "requirement": BudgetRatios(system=0.15, immediate=0.35, working=0.40, persistent=0.10),
    "execution": BudgetRatios(system=0.15, immediate=0.55, working=0.20, persistent=0.10),
    "closing": BudgetRatios(system=0.15, immediate=0.30, working=0.25, persistent=0.30),
}


def layer_shares(available: int, ratios: BudgetRatios) -> dict[str, int]:
    """Split what is left after identity and user input between memory, working and history."""
    weights = {"memory": ratios.persistent, "working": ratios.working, "history": ratios.immediate}
    total = sum(weights.values())
    return {layer: int(available * weight / total) for layer, weight in weights.items()}

# Focused mode answers a question from what retrieval finds: retrieved memories and archived turns get
# the largest share; recent turns keep enough for continuity (at 1,000 tokens, about the last turn or two).
# Measured on LoCoMo at 1k: a 30 % recent-turn share held 285 tokens that rarely carried the evidence;
# at 15 % evidence recall rose 1.6 points (2 conversations). Issue 17, on the dev splits of bench.recall (every
# suite): recent turns 10 % and working state 5 % (was 15 / 15) gave retrieval ~80 % of what is left, +0.9 on
# LoCoMo and +2.3 on MADial-Bench zh at 1k, nothing lost at 2k/4k; the newest segment is cut to its share
# rather than dropped, and unused budget still flows between layers.
MODE_DEFAULTS: dict[str, BudgetRatios] = {
    "focused": BudgetRatios(system=0.15, immediate=0.10, working=0.05, persistent=0.55),
}
