"""Withholding what states a superseded value: the same answer as checking every value, at a cost that follows the
values the text could hold, not every value the user ever superseded (issue 48: a user who changed their phone in
each of 300 conversations)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import acn.assembly.current as current
from acn.assembly.current import current_memories, mentions_stale
from acn.common.models import Memory
from acn.text.numbers import value_present

PARTS = ["13912345678", "139 1234 5678", "１３９１２３４５６７８", "3万", "45秒", "1,200元", "1200", "12.5",
         "A000123", "订单", "电话", " ", "的", "30", "3", "0.5", "2026-12-05"]


def memory(key: str, text: str) -> Memory:
    return Memory(id=key, kind="fact", content=text, importance=5, scope="user", agent_id="kefu", session_id="c-1",
                  user_id="u-42", created_at=0, updated_at=0, version=1)


def every_value(text: str, stale: frozenset[str]) -> bool:
    """The definition: any stale value present in the text."""
    return any(value_present(value, text) for value in stale)


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.sampled_from(PARTS), max_size=8).map("".join),
       stale=st.frozensets(st.sampled_from(PARTS), min_size=1, max_size=6))
def test_mentions_stale_answers_as_every_value_does(text: str, stale: frozenset[str]) -> None:
    assert mentions_stale(text, stale) == every_value(text, stale)


def test_an_empty_needle_still_matches_every_text() -> None:
    # value_present reads a value without digits or letters left ("  ") as present anywhere; so does the check.
    assert mentions_stale("你好", frozenset({" "})) is every_value("你好", frozenset({" "})) is True


def test_candidates_without_a_stale_value_check_none(monkeypatch: pytest.MonkeyPatch) -> None:
    stale = {f"139{n:08d}" for n in range(300)}  # 300 phones, each superseded by the next
    calls: list[str] = []

    def counted(value: str, text: str) -> bool:
        calls.append(value)
        return value_present(value, text)

    monkeypatch.setattr(current, "value_present", counted)
    found = [memory(f"m{n}", f"我喜欢第{n}款零食") for n in range(40)]
    found += [memory("old", "我的电话是 139 0000 0007"), memory("new", "我的电话是 13900000300")]
    served, withheld = current_memories(found, stale)
    assert [m.id for m in withheld] == ["old"]
    assert len(served) == 41
    # Only the one value whose digits are in a text was checked in full, not 300 values for each of 42 texts.
    assert calls == ["13900000007"]
