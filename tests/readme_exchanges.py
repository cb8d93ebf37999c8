"""The README's shown exchanges, run on a fresh server: `python -m tests.readme_exchanges [--write]`.

An exchange is a ```bash block of `curl -s localhost:8000/v1/nodes/<node> ... -d '<json>'` calls followed by a
```json block: the answer of its last call, as the README shows it. A `<!-- shown: a, b -->` line right before the
JSON block says the README shows only those fields (what `| jq '{a, b}'` keeps). Every exchange runs, in README
order, against one `python server.py` on a fresh store with the default embedder, as a reader's first `make run`.

tests/test_readme_exchanges.py fails when a shown answer differs from the server's (ids and times aside); with
`--write` this module rewrites the README's JSON blocks from the server's answers instead.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from tests.conftest import serving

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"```(bash|json)\n(.*?)```", re.DOTALL)
CALL = re.compile(r"curl -s localhost:8000/v1/nodes/(\w+) -H 'Content-Type: application/json' -d '(.*?)'", re.DOTALL)
SHOWN = re.compile(r"<!-- shown: ([\w, ]+) -->\s*$")
# What differs from run to run: ids, request ids and times (an id stays an id; its value is not compared).
VARYING_KEYS = frozenset({"id", "request_id", "created_at", "updated_at"})
WIDTH = 118


@dataclass(frozen=True)
class Exchange:
    """One shown exchange: its calls (node, body), the fields shown, and where its answer sits in the README."""

    calls: list[tuple[str, dict[str, Any]]]
    fields: list[str] | None
    answer_start: int
    answer_end: int
    shown: Any


def exchanges(text: str) -> list[Exchange]:
    """Return the README's exchanges in order."""
    found: list[Exchange] = []
    calls: list[tuple[str, dict[str, Any]]] = []
    for block in BLOCK.finditer(text):
        if block.group(1) == "bash":
            calls = [(node, json.loads(body)) for node, body in CALL.findall(block.group(2))]
            continue
        if not calls:
            continue
        marker = SHOWN.search(text, 0, block.start())
        near = marker is not None and text[marker.end():block.start()].strip() == ""
        fields = [field.strip() for field in marker.group(1).split(",")] if marker and near else None
        found.append(Exchange(calls, fields, block.start(2), block.end(2), json.loads(block.group(2))))
        calls = []
    return found


def run(base_url: str, exchange: Exchange) -> Any:
    """Make the exchange's calls in order; return the last answer as the README shows it."""
    answer: Any = None
    for node, body in exchange.calls:
        response = requests.post(f"{base_url}/v1/nodes/{node}", json=body, timeout=120)
        assert response.status_code == 200, (node, response.text)
        answer = response.json()
    return {field: answer[field] for field in exchange.fields} if exchange.fields else answer


def comparable(value: Any) -> Any:
    """Return the value with what varies between runs (VARYING_KEYS) blanked out."""
    if isinstance(value, dict):
        return {key: "…" if key in VARYING_KEYS else comparable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def answers() -> list[tuple[Exchange, Any]]:
    """Run every exchange of the README on one fresh server; return each with the server's answer."""
    shown = exchanges(README.read_text(encoding="utf-8"))
    with serving(ACN_EMBEDDER="use") as base_url:
        return [(exchange, run(base_url, exchange)) for exchange in shown]


def render(value: Any, indent: int = 0) -> str:
    """Return JSON as the README lays it out: top-level keys one a line, shorter objects packed onto lines."""
    inline = json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(value, dict | list) or (indent and indent + len(inline) <= WIDTH):
        return inline
    pad = " " * (indent + 2)
    if isinstance(value, list):
        return "[\n" + ",\n".join(pad + render(item, indent + 2) for item in value) + "\n" + " " * indent + "]"
    parts = [f"{json.dumps(key, ensure_ascii=False)}: {render(item, indent + 2)}" for key, item in value.items()]
    lines: list[str] = []
    for part in parts:
        packable = indent and "\n" not in part and lines and "\n" not in lines[-1]
        if packable and len(pad) + len(lines[-1]) + 2 + len(part) <= WIDTH:
            lines[-1] += ", " + part
        else:
            lines.append(part)
    return "{\n" + ",\n".join(pad + line for line in lines) + "\n" + " " * indent + "}"


def write(results: list[tuple[Exchange, Any]]) -> str:
    """Return the README with each shown answer that differs replaced by the server's (one that differs only in
    ids and times is left as it is)."""
    text = README.read_text(encoding="utf-8")
    for exchange, answer in sorted(results, key=lambda pair: -pair[0].answer_start):
        if comparable(answer) == comparable(exchange.shown):
            continue
        text = text[:exchange.answer_start] + render(answer) + "\n" + text[exchange.answer_end:]
    return text


def main(argv: list[str] | None = None) -> int:
    """Check the README's exchanges (exit 1 when one differs), or rewrite them with --write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the README's JSON blocks from the server")
    args = parser.parse_args(argv)
    results = answers()
    if args.write:
        README.write_text(write(results), encoding="utf-8")
        print(f"wrote {len(results)} answers into {README.relative_to(ROOT)}")
        return 0
    differ = [exchange.calls[-1][0] for exchange, answer in results if comparable(answer) != comparable(exchange.shown)]
    print("differ: " + ", ".join(differ) if differ else f"all {len(results)} exchanges as shown")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
