"""bench.walk counts package crossings; the assemble node stays a thin layer over its pipeline."""

from __future__ import annotations

from pathlib import Path

from bench.walk import REPO, create, crossings, package_of


def test_package_of_names_our_packages_only() -> None:
    assert package_of(str(REPO / "acn" / "nodes" / "assemble.py")) == "nodes"
    assert package_of(str(REPO / "acn" / "server.py")) == "server"
    assert package_of(str(REPO / "nodes" / "assemble.py")) == "nodes"  # the flat layout of earlier commits
    assert package_of(str(REPO / "tests" / "conftest.py")) is None
    assert package_of("<string>") is None
    assert package_of("/usr/lib/python3/json/__init__.py") is None


def test_an_assemble_calls_into_its_pipeline_once(tmp_path: Path) -> None:
    app = create(tmp_path)
    client = app.test_client()
    ns = {"agent_id": "walk", "session_id": "s1"}
    try:
        record = {**ns, "messages": [{"role": "user", "content": "预算不超过3万元。"}]}
        assert client.post("/v1/nodes/record_turn", json=record).status_code == 200
        body = {**ns, "user_input": "预算是多少？", "max_tokens": 1000, "mode": "focused"}

        def assemble() -> None:
            assert client.post("/v1/nodes/assemble", json=body).status_code == 200

        assemble()
        counted = crossings(assemble)
    finally:
        app.extensions["acn"].close()
    # The node declares NODE and hands the request to acn.assembly.assemble: one call down, none back up.
    assert counted[("nodes", "assembly")] == 1
    assert counted[("assembly", "nodes")] == 0
    assert sum(n for (caller, _), n in counted.items() if caller == "nodes") == 1
