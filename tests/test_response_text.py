"""The absence checks of the suite read the text a response carries, not its random ids (issue 35)."""

from __future__ import annotations

import json

from tests.response_text import carried_text


def test_a_value_inside_a_random_id_is_not_carried_text() -> None:
    # What made test_an_attacker_llm_cannot_store_its_own_text fail about one run in a hundred: an archive id that
    # happened to hold the attacker's "9911". The whole body holds it; the text the response carries does not.
    body = {"ok": True, "request_id": "0a9911bc" * 4, "archived_ids": ["turn_5c9911e0"],
            "segments": [{"id": "seg_99110000", "facts": ["the PIN was changed"], "key_numbers": {"金额": "12万"}}],
            "recent_messages": [{"role": "user", "content": "hello", "meta": {"session_id": "s-9911"}}]}
    assert "9911" in json.dumps(body)
    text = carried_text(body)
    assert "9911" not in text
    assert all(part in text for part in ("the PIN was changed", "金额", "12万", "hello", "user"))


def test_text_anywhere_else_is_read() -> None:
    body = {"segments": [{"facts": ["the user's PIN is 9911"]}], "working_summary": "", "stats": {"n": 9911}}
    assert carried_text(body).count("9911") == 2
