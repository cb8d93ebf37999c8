"""Keys that resist guessing: a short key stops the start, `acn keygen` prints a good one, failed keys are
throttled per client address and counted (issue 34)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from acn.app.key_guard import FREE_FAILURES, MAX_WAIT_SECONDS, KeyGuard, LocalCounts
from acn.common.auth import MIN_KEY_CHARS, parse_api_keys
from acn.common.errors import SignInThrottledError, UnauthorizedError
from acn.server import create_app
from tests.conftest import ROOT, assert_error, make_settings, server_env
from tests.redis_support import redis_server


def start_refused(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environment = server_env(ACN_MILVUS_URI=str(tmp_path / "memory.db"), ACN_LOG_LEVEL="WARNING", **env)
    return subprocess.run([sys.executable, "server.py", "--port", "0"], cwd=ROOT, env=environment, text=True,
                          capture_output=True, timeout=120)


def test_a_short_key_stops_the_start_naming_the_rule(tmp_path: Path) -> None:
    refused = start_refused(tmp_path, ACN_API_KEYS="long-enough-key-0001:beta,7:alpha")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "agent-context-nodes: cannot start: ACN_API_KEYS entry 2: a key must be at least 16 characters long "
        "(`acn keygen` prints a good one)")
    assert not (tmp_path / "memory.db").exists()  # refused before the store is opened


def test_keygen_prints_a_key_the_server_takes() -> None:
    run = subprocess.run([sys.executable, "-m", "acn.app.cli", "keygen", "--tenant", "alpha"], cwd=ROOT, text=True,
                         capture_output=True, timeout=60)
    assert run.returncode == 0, run.stderr
    entry = run.stdout.strip()
    key, tenant = entry.rsplit(":", 1)
    assert tenant == "alpha" and len(key) >= MIN_KEY_CHARS + 16
    assert parse_api_keys(entry) == {key: "alpha"}
    again = subprocess.run([sys.executable, "-m", "acn.app.cli", "keygen"], cwd=ROOT, text=True, capture_output=True,
                           timeout=60)
    assert again.stdout.strip() != key and len(again.stdout.strip()) == len(key)


KEY = "right-key-0123456789abcdef"
ATTACKER = {"REMOTE_ADDR": "10.9.8.7"}
NEIGHBOUR = {"REMOTE_ADDR": "10.9.8.8"}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture()
def guarded_app(tmp_path: Path) -> Iterator[Flask]:
    application = create_app(make_settings(tmp_path, api_keys=f"{KEY}:alpha"))
    yield application
    application.extensions["acn"].close()


def retrieve(client: FlaskClient, key: str, environ: dict[str, str]) -> Any:
    return client.post("/v1/nodes/memory_retrieve", json={"agent_id": "a", "session_id": "s", "query": "x"},
                       headers=bearer(key), environ_base=environ)


def wait_out(response: Any) -> None:
    time.sleep(int(response.headers["Retry-After"]) + 0.2)  # the client does what the header says


def test_wrong_bearer_keys_are_throttled_per_address_and_counted(guarded_app: Flask) -> None:
    client = guarded_app.test_client()
    for guess in range(FREE_FAILURES):
        assert_error(retrieve(client, f"guess-{guess:020d}", ATTACKER), 401, "unauthorized")
    refused = retrieve(client, "guess-4", ATTACKER)
    assert_error(refused, 429, "sign_in_throttled")
    assert refused.headers["Retry-After"] == "2"
    # While the address waits even the right key is refused unchecked: no guess is answered during the wait.
    assert_error(retrieve(client, KEY, ATTACKER), 429, "sign_in_throttled")
    assert retrieve(client, KEY, NEIGHBOUR).status_code == 200  # another address is not held up
    wait_out(refused)
    again = retrieve(client, "guess-5", ATTACKER)
    assert_error(again, 429, "sign_in_throttled")
    assert again.headers["Retry-After"] == "4"  # the wait grows with each wrong key
    wait_out(again)
    assert retrieve(client, KEY, ATTACKER).status_code == 200  # the right key works once the wait is over
    last = retrieve(client, "guess-6", ATTACKER)  # ... and clears nothing: the next wrong key waits longer
    assert_error(last, 429, "sign_in_throttled")
    assert last.headers["Retry-After"] == "8"
    metrics = client.get("/metrics", headers=bearer(KEY)).get_data(as_text=True)
    assert f'acn_auth_failures_total{{event="failed",where="api_key"}} {FREE_FAILURES + 3}.0' in metrics.splitlines()
    assert 'acn_auth_failures_total{event="throttled",where="api_key"} 4.0' in metrics.splitlines()


def test_the_right_key_clears_no_failure_made_with_other_keys(guarded_app: Flask) -> None:
    """Issue 49: five wrong keys, then the tenant's own right key, over and over, from one address."""
    client = guarded_app.test_client()
    answers = []
    for round_ in range(3):
        answers += [retrieve(client, f"guess-{round_}-{guess:016d}", ATTACKER).status_code
                    for guess in range(FREE_FAILURES)]
        answers.append(retrieve(client, KEY, ATTACKER).status_code)
    # Before, the right key cleared the count: [401] * 5 + [200], three times (6,640 guesses in 10 s).
    assert answers == [401] * FREE_FAILURES + [200] + [429] * 2 * (FREE_FAILURES + 1)
    metrics = client.get("/metrics", headers=bearer(KEY), environ_base=NEIGHBOUR).get_data(as_text=True)
    # Six wrong keys were checked: the five free ones and the one that started the wait; the rest were refused
    # unchecked.
    assert f'acn_auth_failures_total{{event="failed",where="api_key"}} {FREE_FAILURES + 1}.0' in metrics.splitlines()


def test_guessing_between_right_keys_stays_throttled_over_time() -> None:
    """The same attack for 10 s of a clock, a key a millisecond: the wrong keys checked are the free ones and
    one each time a wait ends (before: 8,334 of them)."""
    clock_ms = [0]
    events: list[str] = []
    guard = KeyGuard(LocalCounts(FREE_FAILURES, MAX_WAIT_SECONDS, clock=lambda: clock_ms[0] / 1000),
                     observe=lambda event, _where: events.append(event))
    signed_in = 0
    while clock_ms[0] < 10_000:
        key = KEY if clock_ms[0] % (FREE_FAILURES + 1) == FREE_FAILURES else f"guess-{clock_ms[0]:020d}"
        try:
            guard.authenticate(f"Bearer {key}", {KEY: "alpha"}, "10.9.8.7", "api_key")
            signed_in += 1
        except (UnauthorizedError, SignInThrottledError):
            pass
        clock_ms[0] += 1
    # Waits of 2 and 4 s end within the 10 s, the one of 8 s does not: 5 free wrong keys and 3 that set a wait.
    assert events.count("failed") == FREE_FAILURES + 3
    assert 1 <= signed_in <= 3


def sign_in(client: FlaskClient, key: str) -> Any:
    form = client.get("/ui/login", environ_base=ATTACKER).get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]*)"', form).group(1)  # type: ignore[union-attr]
    return client.post("/ui/login", data={"api_key": key, "csrf_token": token, "next": "/ui"}, environ_base=ATTACKER)


def test_failed_sign_ins_are_throttled_and_the_right_key_signs_in_after_the_wait(guarded_app: Flask) -> None:
    client = guarded_app.test_client()
    for guess in range(FREE_FAILURES):
        failed = sign_in(client, f"guess-{guess:020d}")
        assert failed.status_code == 401 and 'data-problem="sign_in_failed"' in failed.get_data(as_text=True)
    refused = sign_in(client, "guess-4")
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "2"
    assert 'data-problem="sign_in_throttled"' in refused.get_data(as_text=True)
    assert sign_in(client, KEY).status_code == 429
    wait_out(refused)
    signed_in = sign_in(client, KEY)
    assert signed_in.status_code == 303 and "acn_ui_session=" in signed_in.headers["Set-Cookie"]


def test_replicas_share_the_count_through_redis(tmp_path: Path) -> None:
    with redis_server() as redis:
        apps = [create_app(make_settings(tmp_path / name, api_keys=f"{KEY}:alpha",
                                         redis_url=redis.url)) for name in ("one", "two")]
        try:
            first, second = (app.test_client() for app in apps)
            for guess in range(FREE_FAILURES - 1):
                assert_error(retrieve(first, f"guess-{guess:020d}", ATTACKER), 401)
            assert_error(retrieve(second, "guess-last", ATTACKER), 401)
            assert_error(retrieve(first, "guess-more", ATTACKER), 429, "sign_in_throttled")  # one past, in all
            assert_error(retrieve(second, KEY, ATTACKER), 429, "sign_in_throttled")
        finally:
            for app in apps:
                app.extensions["acn"].close()
