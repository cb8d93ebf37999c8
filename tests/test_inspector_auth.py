"""Signing in to /ui (issue 16 M5): an API key becomes a /ui-only session cookie; CSRF guards every /ui action.

A real app on a Lite file with two tenants' keys, driven through Flask's test client (which keeps cookies like a
browser: by path). tests/test_inspector_browser.py signs in through the form in real Chromium.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from http.cookies import SimpleCookie
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.inspector.signin import LOGIN_COOKIE, SESSION_COOKIE, UiAuth, derive_secret
from acn.server import create_app
from tests.conftest import assert_error, make_settings
from tests.long_conversation import turn_messages

KEY_A, KEY_B = "ui-key-alpha-7f3k", "ui-key-bravo-9q2z"
TENANT_A, TENANT_B = "tenant-a", "tenant-b"
MINUTES = 90
HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
NS_A = {"agent_id": "alpha-bot", "session_id": "alpha-s1"}
NS_B = {"agent_id": "bravo-bot", "session_id": "bravo-s1"}
CANARY_B = "bravo canary 4242 only tenant b may see this"


@pytest.fixture(scope="module")
def keyed_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    settings = make_settings(tmp_path_factory.mktemp("ui-auth"), api_keys=f"{KEY_A}:{TENANT_A},{KEY_B}:{TENANT_B}",
                             ui_session_minutes=MINUTES)
    application = create_app(settings)
    seeder = application.test_client()
    for key, ns, content in ((KEY_A, NS_A, "alpha fact"), (KEY_B, NS_B, CANARY_B)):
        bearer = {"Authorization": f"Bearer {key}"}
        for turn in (1, 2, 3):
            answer = seeder.post("/v1/nodes/record_turn", json={**ns, "messages": turn_messages(turn)}, headers=bearer)
            assert answer.status_code == 200, answer.get_data(as_text=True)
        answer = seeder.post("/v1/nodes/memory_write", json={**ns, "items": [{"kind": "fact", "content": content}]},
                             headers=bearer)
        assert answer.status_code == 200
    yield application
    application.extensions["acn"].close()


@pytest.fixture()
def browser(keyed_app: Flask) -> FlaskClient:
    """A fresh cookie jar, like a new browser profile."""
    return keyed_app.test_client()


def auth_of(app: Flask) -> UiAuth:
    return app.extensions["acn_ui_auth"]  # type: ignore[no-any-return]


def field(page: str, name: str) -> str:
    found = re.search(rf'name="{name}" (?:value|content)="([^"]*)"', page)
    assert found, f"no {name} in the page"
    return found.group(1)


def set_cookies(response: Any) -> dict[str, SimpleCookie]:
    jar: dict[str, SimpleCookie] = {}
    for header in response.headers.getlist("Set-Cookie"):
        cookie: SimpleCookie = SimpleCookie()
        cookie.load(header)
        for name in cookie:
            jar[name] = cookie
    return jar


def sign_in(client: FlaskClient, key: str, next_path: str = "/ui", **kwargs: Any) -> Any:
    form = client.get("/ui/login", headers=HTML, **kwargs)
    assert form.status_code == 200
    token = field(form.get_data(as_text=True), "csrf_token")
    return client.post("/ui/login", data={"api_key": key, "csrf_token": token, "next": next_path}, **kwargs)


def page_csrf(client: FlaskClient, ns: dict[str, str]) -> str:
    page = client.get(f"/ui/agents/{ns['agent_id']}/sessions/{ns['session_id']}", headers=HTML)
    assert page.status_code == 200
    return field(page.get_data(as_text=True), "csrf-token")


def state_version(app: Flask, key: str, ns: dict[str, str]) -> int:
    answer = app.test_client().post("/v1/nodes/session_state", json=ns, headers={"Authorization": f"Bearer {key}"})
    return int(answer.get_json()["version"])


def test_a_browser_without_a_credential_is_sent_to_sign_in_and_an_api_client_gets_401(browser: FlaskClient) -> None:
    page = browser.get("/ui/agents/alpha-bot/sessions/alpha-s1?lang=en", headers=HTML)
    assert page.status_code == 303
    assert page.headers["Location"].startswith("/ui/login?next=/ui/agents/alpha-bot/sessions/alpha-s1")
    assert_error(browser.get("/ui", headers={"Accept": "application/json"}), 401, "unauthorized")
    assert_error(browser.post("/ui/nodes/assemble", json={**NS_A, "user_input": "x"}), 401, "unauthorized")
    form = browser.get("/ui/login", headers=HTML)
    assert form.status_code == 200 and 'name="api_key"' in form.get_data(as_text=True)
    styles = browser.get("/ui/static/inspector.css")  # the sign-in page's styles
    assert styles.status_code == 200
    styles.close()
    assert_error(browser.get("/ui/static/inspector.js"), 401, "unauthorized")


def test_signing_in_sets_a_signed_http_only_strict_cookie_for_ui_only(browser: FlaskClient) -> None:
    answer = sign_in(browser, KEY_A, next_path="/ui/agents/alpha-bot/sessions/alpha-s1")
    assert answer.status_code == 303 and answer.headers["Location"] == "/ui/agents/alpha-bot/sessions/alpha-s1"
    cookie = set_cookies(answer)[SESSION_COOKIE][SESSION_COOKIE]
    assert cookie["httponly"] is True and cookie["samesite"] == "Strict" and cookie["path"] == "/ui"
    assert int(cookie["max-age"]) == MINUTES * 60 and not cookie["secure"]  # plain http on loopback
    assert KEY_A not in cookie.value and TENANT_A not in cookie.value
    assert browser.get("/ui", headers=HTML).status_code == 200
    over_https = sign_in(browser, KEY_A, base_url="https://localhost")
    assert set_cookies(over_https)[SESSION_COOKIE][SESSION_COOKIE]["secure"] is True


def test_a_bad_key_gets_an_error_page_and_no_cookie(browser: FlaskClient) -> None:
    for key in ("wrong-key", "", KEY_A + "x"):
        answer = sign_in(browser, key)
        assert answer.status_code == 401 and 'data-problem="sign_in_failed"' in answer.get_data(as_text=True)
        assert SESSION_COOKIE not in set_cookies(answer)
    assert browser.get("/ui", headers=HTML).status_code == 303


def test_sign_in_refuses_a_form_without_its_token_or_from_another_site(keyed_app: Flask) -> None:
    forged = keyed_app.test_client()  # a page elsewhere posts the attacker's key: no login cookie, no token
    answer = forged.post("/ui/login", data={"api_key": KEY_B, "csrf_token": "x", "next": "/ui"})
    assert answer.status_code == 403 and SESSION_COOKIE not in set_cookies(answer)
    cross = keyed_app.test_client()
    token = field(cross.get("/ui/login", headers=HTML).get_data(as_text=True), "csrf_token")
    answer = cross.post("/ui/login", data={"api_key": KEY_B, "csrf_token": token},
                        headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403 and SESSION_COOKIE not in set_cookies(answer)
    other = keyed_app.test_client()
    other.get("/ui/login", headers=HTML)  # its own login cookie, but another form's token
    assert other.post("/ui/login", data={"api_key": KEY_B, "csrf_token": token}).status_code == 403


def test_after_sign_in_goes_to_an_inspector_path_only(browser: FlaskClient) -> None:
    for target in ("https://evil.example/ui", "//evil.example/ui", "/v1/memories", "/\\evil.example", "/uix"):
        assert sign_in(browser, KEY_A, next_path=target).headers["Location"] == "/ui"


def test_the_cookie_shows_its_own_tenant_only(browser: FlaskClient) -> None:
    sign_in(browser, KEY_A)
    overview = browser.get("/ui", headers=HTML).get_data(as_text=True)
    assert 'data-agent="alpha-bot"' in overview and "bravo-bot" not in overview
    other = browser.get("/ui/agents/bravo-bot/sessions/bravo-s1", headers=HTML)
    assert other.status_code in (200, 404) and CANARY_B not in other.get_data(as_text=True)
    csrf = page_csrf(browser, NS_A)
    found = browser.post("/ui/nodes/memory_retrieve", json={**NS_B, "query": "bravo canary"},
                         headers={"X-CSRF-Token": csrf})
    assert found.status_code == 200 and CANARY_B not in found.get_data(as_text=True)
    own = browser.post("/ui/nodes/memory_retrieve", json={**NS_A, "query": "alpha fact"}, headers={"X-CSRF-Token": csrf})
    assert own.status_code == 200 and "alpha fact" in own.get_data(as_text=True)


def test_the_cookie_never_authenticates_the_api(browser: FlaskClient) -> None:
    sign_in(browser, KEY_A)
    token = browser.get_cookie(SESSION_COOKIE, path="/ui")
    assert token is not None
    # The browser would not send a Path=/ui cookie to /v1; a caller that does anyway gets nothing either.
    browser.set_cookie(SESSION_COOKIE, token.value, path="/")
    before = state_version(browser.application, KEY_A, NS_A)
    assert_error(browser.post("/v1/nodes/memory_write", json={**NS_A, "items": [{"kind": "fact", "content": "x"}]}),
                 401, "unauthorized")
    assert_error(browser.post("/v1/nodes/session_rollback", json={**NS_A, "version": 1}), 401, "unauthorized")
    assert_error(browser.get("/v1/memories", query_string={"agent_id": "alpha-bot"}), 401, "unauthorized")
    assert_error(browser.post("/v1/dify/extension", json={"point": "ping"}), 401, "unauthorized")
    assert state_version(browser.application, KEY_A, NS_A) == before


@pytest.mark.parametrize("change", ["expired", "signature", "key id", "expiry", "nonce", "far future", "garbage"])
def test_expired_or_tampered_tokens_are_refused(keyed_app: Flask, change: str) -> None:
    auth = auth_of(keyed_app)
    good = auth.issue(KEY_A)
    version, key_id, expiry, nonce, mac = good.split(".")
    other_key_id = auth.key_id(KEY_B)
    token = {
        "expired": auth.issue(KEY_A, now=time.time() - MINUTES * 60 - 5),
        "signature": ".".join([version, key_id, expiry, nonce, mac[:-2] + ("AA" if mac[-2:] != "AA" else "BB")]),
        "key id": ".".join([version, other_key_id, expiry, nonce, mac]),
        "expiry": ".".join([version, key_id, str(int(expiry) - 60), nonce, mac]),
        "nonce": ".".join([version, key_id, expiry, ("B" if nonce[0] == "A" else "A") + nonce[1:], mac]),
        "far future": auth.issue(KEY_A, now=time.time() + 10 * 86400),
        "garbage": "v1.....",
    }[change]
    client = keyed_app.test_client()
    client.set_cookie(SESSION_COOKIE, good, path="/ui")
    assert client.get("/ui", headers=HTML).status_code == 200  # the untouched token works
    client.set_cookie(SESSION_COOKIE, token, path="/ui")
    assert client.get("/ui", headers=HTML).status_code == 303
    assert_error(client.get("/ui"), 401, "unauthorized")


def test_a_token_dies_with_its_key_and_replicas_with_the_same_keys_agree(keyed_app: Flask) -> None:
    auth = auth_of(keyed_app)
    token = auth.issue(KEY_A)
    keys = {KEY_A: TENANT_A, KEY_B: TENANT_B}
    replica = UiAuth(keys, derive_secret("", keys), MINUTES * 60)
    session = replica.session(token)
    assert session is not None and session.tenant == TENANT_A
    without_a = {KEY_B: TENANT_B}
    assert UiAuth(without_a, auth.secret, MINUTES * 60).session(token) is None  # same secret, key removed
    assert UiAuth(without_a, derive_secret("", without_a), MINUTES * 60).session(token) is None
    shared = UiAuth(keys, derive_secret("one-secret", keys), 600)
    assert UiAuth(without_a | {KEY_A: TENANT_A}, derive_secret("one-secret", {}), 600).session(shared.issue(KEY_A))
    assert UiAuth(keys, derive_secret("another-secret", keys), 600).session(shared.issue(KEY_A)) is None


def test_a_ui_action_without_its_csrf_token_is_refused_and_changes_nothing(keyed_app: Flask) -> None:
    victim = keyed_app.test_client()
    sign_in(victim, KEY_A)
    before = state_version(keyed_app, KEY_A, NS_A)
    rollback = {**NS_A, "version": 1}
    assert_error(victim.post("/ui/nodes/session_rollback", json=rollback), 403, "csrf_token_invalid")
    assert_error(victim.post("/ui/nodes/session_rollback", json=rollback, headers={"X-CSRF-Token": "guess"}),
                 403, "csrf_token_invalid")
    stranger = keyed_app.test_client()  # another sign-in's token does not fit this one
    sign_in(stranger, KEY_A)
    foreign = page_csrf(stranger, NS_A)
    assert_error(victim.post("/ui/nodes/session_rollback", json=rollback, headers={"X-CSRF-Token": foreign}),
                 403, "csrf_token_invalid")
    assert_error(victim.post("/ui/logout", data={"csrf_token": ""}), 403, "csrf_token_invalid")
    assert state_version(keyed_app, KEY_A, NS_A) == before
    assert victim.get("/ui", headers=HTML).status_code == 200  # still signed in
    done = victim.post("/ui/nodes/session_rollback", json=rollback, headers={"X-CSRF-Token": page_csrf(victim, NS_A)})
    assert done.status_code == 200 and state_version(keyed_app, KEY_A, NS_A) == before + 1


def test_the_page_calls_only_its_own_nodes_under_ui(browser: FlaskClient) -> None:
    sign_in(browser, KEY_A)
    csrf = page_csrf(browser, NS_A)
    write = browser.post("/ui/nodes/memory_write", json={**NS_A, "items": [{"kind": "fact", "content": "x"}]},
                         headers={"X-CSRF-Token": csrf})
    assert_error(write, 404, "not_found")
    preview = browser.post("/ui/nodes/assemble", json={**NS_A, "user_input": "hello", "max_tokens": 2000},
                           headers={"X-CSRF-Token": csrf})
    assert preview.status_code == 200 and preview.get_json()["ok"] is True


def test_the_api_key_header_still_opens_ui_and_its_actions_need_the_token_too(keyed_app: Flask) -> None:
    client = keyed_app.test_client()
    bearer = {"Authorization": f"Bearer {KEY_A}"}
    page = client.get("/ui/agents/alpha-bot/sessions/alpha-s1", headers=bearer)
    assert page.status_code == 200 and 'action="/ui/logout"' not in page.get_data(as_text=True)
    csrf = field(page.get_data(as_text=True), "csrf-token")
    body = {**NS_A, "query": "alpha"}
    assert_error(client.post("/ui/nodes/memory_retrieve", json=body, headers=bearer), 403, "csrf_token_invalid")
    assert client.post("/ui/nodes/memory_retrieve", json=body, headers={**bearer, "X-CSRF-Token": csrf}).status_code \
        == 200


def test_sign_out_clears_the_cookie(browser: FlaskClient) -> None:
    sign_in(browser, KEY_A)
    page = browser.get("/ui", headers=HTML).get_data(as_text=True)
    assert 'action="/ui/logout"' in page
    answer = browser.post("/ui/logout", data={"csrf_token": field(page, "csrf_token")})
    assert answer.status_code == 303 and answer.headers["Location"].startswith("/ui/login")
    cleared = set_cookies(answer)[SESSION_COOKIE][SESSION_COOKIE]
    assert cleared.value == "" and cleared["max-age"] == "0" and cleared["path"] == "/ui"
    assert browser.get_cookie(SESSION_COOKIE, path="/ui") is None
    assert browser.get("/ui", headers=HTML).status_code == 303


def test_without_keys_the_inspector_stays_open_and_sign_in_says_so(client: FlaskClient, ns: dict[str, str]) -> None:
    assert client.get("/ui", headers=HTML).status_code == 200
    login = client.get("/ui/login", headers=HTML)
    assert login.status_code == 200 and 'data-auth="off"' in login.get_data(as_text=True)
    assert 'name="api_key"' not in login.get_data(as_text=True) and LOGIN_COOKIE not in set_cookies(login)
    # Open does not mean forgeable: the page's actions still need its token.
    assert_error(client.post("/ui/nodes/session_rollback", json={**ns, "version": 1}), 403, "csrf_token_invalid")
