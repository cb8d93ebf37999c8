"""The README's shown exchanges are what a fresh server answers (issue 51); ids and times aside.

`python -m tests.readme_exchanges --write` rewrites them from the server when the answers change on purpose.
"""

from __future__ import annotations

import json

from tests.readme_exchanges import README, answers, comparable, exchanges, render

SAMPLE = """
```bash
curl -s localhost:8000/v1/nodes/memory_write -H 'Content-Type: application/json' -d '{"agent_id": "a"}'
curl -s localhost:8000/v1/nodes/assemble -H 'Content-Type: application/json' -d '{"agent_id": "a", "n": 1}'
```

<!-- shown: mode, tokens -->
```json
{"mode": "focused", "tokens": 3}
```
"""


def test_every_shown_answer_is_what_a_fresh_server_gives() -> None:
    results = answers()
    assert [exchange.calls[-1][0] for exchange, _ in results] == ["memory_retrieve", "assemble"]
    differ = {exchange.calls[-1][0]: answer for exchange, answer in results
              if comparable(answer) != comparable(exchange.shown)}
    assert differ == {}, "the README shows other answers: `python -m tests.readme_exchanges --write`"


def test_the_reader_finds_the_calls_the_fields_and_the_answer() -> None:
    [exchange] = exchanges(SAMPLE)
    assert exchange.calls == [("memory_write", {"agent_id": "a"}), ("assemble", {"agent_id": "a", "n": 1})]
    assert exchange.fields == ["mode", "tokens"] and exchange.shown == {"mode": "focused", "tokens": 3}
    assert len(exchanges(README.read_text(encoding="utf-8"))) == 2


def test_ids_and_times_are_set_aside_and_nothing_else() -> None:
    shown = {"id": "mem_1", "request_id": "r1", "created_at": 1, "content": "x", "score": 0.5}
    assert comparable(shown) == comparable({**shown, "id": "mem_2", "request_id": "r2", "created_at": 2})
    assert comparable(shown) != comparable({**shown, "score": 0.6})
    assert comparable(shown) != comparable({**shown, "content": "y"})


def test_the_written_layout_is_the_same_json() -> None:
    answer = {"ok": True, "memories": [{"id": "mem_1", "content": "对账接口超时设为45秒" * 4, "meta": {}}],
              "tokens": {"total": 1, "by_layer": {"system": 1}}}
    assert json.loads(render(answer)) == answer
