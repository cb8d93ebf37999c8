"""The /ui inspector in process: language choice, escaping, version diffs and errors (the browser tests drive it)."""

from __future__ import annotations

from typing import Any, get_args

import pytest
from flask.testing import FlaskClient

from acn.common.models import MemoryKind
from acn.inspector.i18n import EN, KIND_LABELS, ZH, pick_language
from tests.conftest import assert_error, post
from tests.long_conversation import turn_messages


def record(client: FlaskClient, ns: dict[str, str], turns: range) -> None:
    for turn in turns:
        assert post(client, "record_turn", {**ns, "messages": turn_messages(turn)}).status_code == 200


def test_both_languages_label_everything() -> None:
    assert set(EN) == set(ZH)
    for labels in KIND_LABELS.values():
        assert set(labels) == set(get_args(MemoryKind))


@pytest.mark.parametrize(("requested", "cookie", "accept", "expected"), [
    (None, None, ["zh-CN", "zh"], "zh"),
    (None, None, ["fr-FR", "zh-TW", "en"], "zh"),
    (None, None, ["de-DE"], "en"),
    (None, "zh", ["en-US"], "zh"),
    ("en", "zh", ["zh-CN"], "en"),
    ("xx", None, ["en-GB"], "en"),
])
def test_language_follows_query_then_cookie_then_browser(requested: str | None, cookie: str | None,
                                                         accept: list[str], expected: str) -> None:
    assert pick_language(requested, cookie, accept) == expected


def test_pages_follow_accept_language_and_remember_an_explicit_choice(client: FlaskClient) -> None:
    chinese = client.get("/ui", headers={"Accept-Language": "zh-CN,zh;q=0.9"})
    assert chinese.status_code == 200
    assert '<html lang="zh-CN">' in chinese.get_data(as_text=True) and "智能体与会话" in chinese.get_data(as_text=True)
    assert chinese.headers["Content-Language"] == "zh-CN"
    english = client.get("/ui/?lang=en", headers={"Accept-Language": "zh-CN"})
    assert "Agents and sessions" in english.get_data(as_text=True)
    assert "acn_ui_lang=en" in english.headers["Set-Cookie"]
    again = client.get("/ui", headers={"Accept-Language": "zh-CN"})
    assert "Agents and sessions" in again.get_data(as_text=True)


def test_stored_text_is_escaped(client: FlaskClient, ns: dict[str, str]) -> None:
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)>'
    assert post(client, "memory_write", {**ns, "items": [{"kind": "fact", "content": hostile}]}).status_code == 200
    page = client.get(f"/ui/agents/{ns['agent_id']}/sessions/{ns['session_id']}").get_data(as_text=True)
    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in page


def test_version_diff_fragment(client: FlaskClient, ns: dict[str, str]) -> None:
    record(client, ns, range(1, 4))
    url = f"/ui/agents/{ns['agent_id']}/sessions/{ns['session_id']}/diff"
    fragment = client.get(url, query_string={"from": 1, "to": 3}, headers={"X-Fragment": "1"})
    text = fragment.get_data(as_text=True)
    assert fragment.status_code == 200 and "<html" not in text
    assert 'data-field="turn">1 → 3<' in text
    whole = client.get(url, query_string={"from": 1, "to": 3}).get_data(as_text=True)
    assert whole.startswith("<!doctype html>") and 'data-field="turn">1 → 3<' in whole


@pytest.mark.parametrize(("path", "status", "code"), [
    ("/ui/agents/bad%20agent/sessions/s-1", 422, "validation_error"),
    ("/ui/agents/a-1/sessions/s-1/diff?from=0&to=1", 422, "validation_error"),
    ("/ui/agents/a-1/sessions/s-1/diff?from=1&to=99", 404, "not_found"),
    # "²".isdigit() is True but int("²") raises; 20 digits pass isdigit and overflow the version field.
    ("/ui/agents/a-1/sessions/s-1/diff?from=%C2%B2&to=1", 422, "validation_error"),
    ("/ui/agents/a-1/sessions/s-1/diff?from=1&to=99999999999999999999", 422, "validation_error"),
])
def test_bad_requests_get_the_error_envelope(client: FlaskClient, path: str, status: int, code: str) -> None:
    body: Any = assert_error(client.get(path), status, code)
    assert body["errors"]
