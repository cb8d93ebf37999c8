"""What one signed-in tenant can do to the server all tenants share: client-given ordinals stay within the session,
and every inspector page costs the same whatever turn numbers are stored (issue 34)."""

from __future__ import annotations

import re

import pytest
from flask.testing import FlaskClient

from acn.inspector.session_view import TURN_WINDOW
from tests.conftest import assert_error, post


def session_url(ns: dict[str, str]) -> str:
    return f"/ui/agents/{ns['agent_id']}/sessions/{ns['session_id']}"


def test_a_turn_number_cannot_run_ahead_of_the_session(client: FlaskClient, ns: dict[str, str]) -> None:
    ahead = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "x", "turn": 10**9}]})
    body = assert_error(ahead, 422, "turn_ahead")
    assert body["errors"] == ["messages.0.turn: at most 1"]
    assert post(client, "session_state", ns).get_json()["version"] == 0  # nothing was recorded
    # The number the server would give is accepted (clients that count turns themselves keep working).
    same = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "x", "turn": 1},
                                                           {"role": "assistant", "content": "y", "turn": 1}]})
    assert same.status_code == 200 and same.get_json()["turn"] == 1
    joined = post(client, "record_turn", {**ns, "messages": [{"role": "assistant", "content": "z", "turn": 2}]})
    assert_error(joined, 422, "turn_ahead")  # an assistant message joins turn 1: 2 would run ahead
    nxt = post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "again"}]})
    assert nxt.get_json()["turn"] == 2


def stored_turn(client: FlaskClient, ns: dict[str, str], number: int) -> None:
    """Store an archived message at turn `number` (an import: rows written before turns were checked)."""
    row = {"id": f"turn_far_{number}", "kind": "turn", "content": "far away", "importance": 3, "scope": "session",
           **ns, "created_at": 1, "updated_at": 1, "version": 1, "turn_range": [number, number],
           "meta": {"role": "user", "message_index": 0}}
    assert client.post("/v1/memories/import", json={"memories": [row]}).status_code == 200


@pytest.mark.parametrize("number", [20_000, 10**9])
def test_the_session_page_is_bounded_whatever_turn_is_stored(client: FlaskClient, ns: dict[str, str],
                                                             number: int) -> None:
    assert post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": "first"}]}).status_code == 200
    stored_turn(client, ns, number)
    page = client.get(session_url(ns))
    text = page.get_data(as_text=True)
    assert page.status_code == 200 and len(page.get_data()) < 1_000_000
    cells = [int(n) for n in re.findall(r'class="turn-cell[^"]*" data-turn="(\d+)"', text)]
    assert cells == list(range(number - TURN_WINDOW + 1, number + 1))  # the latest window, the far turn last
    assert re.search(r'data-field="turns">(\d+)<', text).group(1) == str(number)  # type: ignore[union-attr]
    first = client.get(session_url(ns), query_string={"turns_from": "1"}).get_data(as_text=True)
    cells = [int(n) for n in re.findall(r'class="turn-cell[^"]*" data-turn="(\d+)"', first)]
    assert cells == list(range(1, TURN_WINDOW + 1))
    assert 'data-turn="1" data-status="buffer"' in first and f'href="?turns_from={TURN_WINDOW + 1}#timeline"' in first


@pytest.mark.parametrize("value", ["-1", "x", "²", "99999999999"])
def test_a_bad_turn_window_is_a_422(client: FlaskClient, ns: dict[str, str], value: str) -> None:
    assert_error(client.get(session_url(ns), query_string={"turns_from": value}), 422, "validation_error")
