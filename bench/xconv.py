"""Cross-conversation suites of bench.recall (issue 48): a returning user asks in a new conversation.

- locomo-xconv    LoCoMo, each of a conversation's sessions recorded as its own conversation (`session_id`) of
                  one user (`user_id`) of one agent; every question asked by a focused `assemble` in a new
                  conversation of that user. The same dev / test split as `locomo` (conversations 0–4 dev, 5–9 test).
- zh-daily-xconv  bench/zh_daily.py's generated conversations, each day's messages their own conversation of the
                  user (a few messages a day, dozens of days); the same seeds and split as `zh-daily`.

The baselines see what they see in the single-conversation suites: every message of the user, so bm25 is BM25
over all of the user's messages. Only ours is recorded across conversations.
"""

from __future__ import annotations

import re
from dataclasses import replace
from itertools import groupby
from typing import TYPE_CHECKING

from bench import locomo

if TYPE_CHECKING:
    from bench.recall import Case

SUITES = ("locomo-xconv", "zh-daily-xconv")
BASE = {"locomo-xconv": "locomo", "zh-daily-xconv": "zh-daily"}  # the single-conversation suite each one restates
ASKED_IN = "new"  # the session id suffix of the conversation the questions are asked in


def across(case: Case) -> Case:
    """Return a single-conversation case as its cross-conversation suite's: the same messages and questions, each
    message in the conversation of its sitting (LoCoMo: its session; zh-daily: its day), turns never spanning two."""
    suite = next(name for name, base in BASE.items() if base == case.suite)
    lines = case.lines
    if case.suite == "zh-daily":
        days: dict[str, int] = {}
        lines = [replace(line, session=days.setdefault(line.date, len(days) + 1)) for line in lines]
    turns = [turn for _, sitting in groupby(lines, key=lambda line: line.session)
             for turn in locomo.turns_of(list(sitting))]
    return replace(case, suite=suite, turns=turns, across=True)


def user_namespace(case: Case) -> dict[str, str]:
    """Return the agent and user of a case's conversations (the session id is added per conversation)."""
    name = re.sub(r"[^A-Za-z0-9_.:@-]", "-", case.id)
    return {"agent_id": "recall-bench", "user_id": f"u-{name}"}


def recorded_in(case: Case, turn: list[locomo.Line]) -> dict[str, str]:
    """Return the namespace a turn is recorded in: its sitting's own conversation of the case's user."""
    return {**user_namespace(case), "session_id": f"{user_namespace(case)['user_id']}-s{turn[0].session}"}


def asked_in(case: Case) -> dict[str, str]:
    """Return the namespace the questions are asked in: a conversation of the user that recorded nothing."""
    return {**user_namespace(case), "session_id": f"{user_namespace(case)['user_id']}-{ASKED_IN}"}
