"""One scorer for every system: evidence recall, all-evidence hits, answer-string recall, tokens, latency."""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

_EVIDENCE = re.compile(r"D(\d+):(\d+)")
_FOLD = re.compile(r"[\W_]+", re.UNICODE)


def evidence_ids(raw: Iterable[str]) -> list[str]:
    """Return normalised dialogue ids ("D8:6; D9:17" → D8:6, D9:17; "D30:05" → D30:5), in order, once each."""
    found = [f"D{int(a)}:{int(b)}" for item in raw for a, b in _EVIDENCE.findall(str(item))]
    return list(dict.fromkeys(found))


def fold(text: str) -> str:
    """Return text folded for answer matching: lower case, punctuation and spaces removed."""
    return _FOLD.sub("", text.casefold())


def collect_ids(value: Any, key: str) -> set[str]:
    """Return every value of `key` found anywhere in a nested structure (source metas nest per message)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k == key and isinstance(v, str):
                found.add(v)
            else:
                found |= collect_ids(v, key)
    elif isinstance(value, list):
        for item in value:
            found |= collect_ids(item, key)
    return found


@dataclass
class Outcome:
    """How one context did on one question."""

    category: str
    recall: float
    all_hit: bool
    answer_hit: bool | None
    tokens: int
    latency_ms: float | None = None


def score(evidence: list[str], texts: dict[str, str], context: str, ids_in_context: set[str],
          answer: str | None) -> tuple[float, bool, bool | None]:
    """Return (evidence recall, all evidence in, answer string in) for one context."""
    hits = [e in ids_in_context or (e in texts and texts[e] in context) for e in evidence]
    recall = sum(hits) / len(hits) if hits else 0.0
    answer_hit = None if answer is None or not fold(answer) else fold(answer) in fold(context)
    return recall, all(hits), answer_hit


@dataclass
class Tally:
    """Outcomes per system, summarised per category and overall."""

    outcomes: dict[str, list[Outcome]] = field(default_factory=lambda: defaultdict(list))

    def add(self, system: str, outcome: Outcome) -> None:
        self.outcomes[system].append(outcome)

    def summary(self, system: str, category: str | None = None) -> dict[str, float | None]:
        """Return recall, all-hit, answer recall (%), mean tokens and latency percentiles."""
        rows = [o for o in self.outcomes[system] if category is None or o.category == category]
        if not rows:
            return {}
        answers = [o.answer_hit for o in rows if o.answer_hit is not None]
        latencies = sorted(o.latency_ms for o in rows if o.latency_ms is not None)
        return {
            "n": len(rows),
            "recall": 100 * statistics.mean(o.recall for o in rows),
            "all_hit": 100 * statistics.mean(o.all_hit for o in rows),
            "answer": 100 * statistics.mean(answers) if answers else None,
            "tokens": statistics.mean(o.tokens for o in rows),
            "p50": percentile(latencies, 0.50) if latencies else None,
            "p95": percentile(latencies, 0.95) if latencies else None,
        }


def percentile(sorted_values: list[float], q: float) -> float:
    """Return the q-quantile of sorted values (nearest rank)."""
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]
