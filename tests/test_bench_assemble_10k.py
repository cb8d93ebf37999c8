"""bench.assemble_10k --where: its timers see the steps of a real focused assemble and leave every name as it was."""

from __future__ import annotations

import importlib

import pytest
from flask.testing import FlaskClient

from bench import assemble_10k
from bench.assemble_10k import WHERE, timed_steps
from tests.conftest import post


def _bound() -> list[object]:
    """Every WHERE step as its module holds it, and assemble as the node module calls it."""
    found: list[object] = []
    for module_name, path in WHERE:
        owner: object = importlib.import_module(module_name)
        for part in path.split("."):
            owner = getattr(owner, part)
        found.append(owner)
    found.append(importlib.import_module("acn.nodes.assemble").assemble)
    return found


def test_where_times_the_steps_of_a_focused_assemble_and_puts_every_name_back(client: FlaskClient,
                                                                               ns: dict[str, str]) -> None:
    for text in ("我表姐下个月搬去成都了", "表姐在成都找了份律师助理的工作", "The drone's battery lasts 25 minutes"):
        assert post(client, "record_turn", {**ns, "messages": [{"role": "user", "content": text}]}).status_code == 200
    before = _bound()
    spent: dict[str, float] = {}
    with timed_steps(spent) as counting:
        assert _bound() != before  # the timers are in place, the node's own name for assemble included
        counting[0] = False  # a call made with the switch off is not counted
        assert post(client, "assemble", {**ns, "mode": "focused", "messages": [],
                                         "user_input": "表姐现在做什么工作？"}).status_code == 200
        assert spent == {}
        counting[0] = True
        response = post(client, "assemble", {**ns, "mode": "focused", "messages": [],
                                             "user_input": "搬去成都的那位现在做什么工作？"})
    assert response.status_code == 200
    assert "律师助理" in response.get_json()["memory_text"]
    assert _bound() == before
    # The request went through the node's imported name, so the outermost step and the recall inside it were seen,
    # each once per call (a step that calls itself is not counted twice).
    assert spent["assemble"] > 0 and spent["focused_memories"] > 0 and spent["LocalIndex.search_text"] > 0
    assert spent["focused_memories"] <= spent["assemble"]
    assert set(spent) <= {path for _, path in WHERE}


def test_a_step_that_cannot_be_found_leaves_every_name_as_it_was(monkeypatch: pytest.MonkeyPatch) -> None:
    before = _bound()
    monkeypatch.setattr(assemble_10k, "WHERE", (*WHERE[:3], ("acn.assembly.recall", "no_such_step")))
    with pytest.raises(AttributeError), timed_steps({}):
        pass
    assert _bound() == before
