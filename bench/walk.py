"""Package crossings of one request: how often a call goes from one of our packages into another.

Run: .venv/bin/python -m bench.walk [--pairs]

One record_turn and one assemble (focused), each after a warm-up call of the same kind, in process on a Lite file in
a temp folder. A crossing is a Python call whose caller and callee are modules of ours in different packages
(`acn.nodes` -> `acn.assembly`, ...; the flat layout before `acn/` counts its top-level packages the same way), so
the figure says how tangled a request's walk is, not how long it takes. Works on the flat layout of earlier commits
too (before/after of the one-package restructure, issue 30).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

REPO = Path(__file__).resolve().parents[1]
MESSAGES = [
    {"role": "user", "content": "我们把对账接口的超时设为45秒，预算不超过3万元。"},
    {"role": "assistant", "content": "好的，超时45秒、预算3万元已记下。"},
]


def package_of(filename: str) -> str | None:
    """Return the package of one of our source files (`acn/nodes/x.py` -> nodes), or None for anything else."""
    if not filename.endswith(".py"):  # "<string>": code that dataclasses and the like generate
        return None
    try:
        parts = Path(filename).resolve().relative_to(REPO).parts
    except ValueError:
        return None
    if parts and parts[0] == "acn":
        parts = parts[1:]
    if not parts or parts[0] in {"tests", "bench", ".venv", ".venv312"}:
        return None
    return parts[0].removesuffix(".py")


def crossings(action: Callable[[], Any]) -> Counter[tuple[str, str]]:
    """Run action and count the calls from one of our packages into another, by (caller, callee) package."""
    counted: Counter[tuple[str, str]] = Counter()
    packages: dict[str, str | None] = {}

    def package(frame: FrameType) -> str | None:
        name = frame.f_code.co_filename
        if name not in packages:
            packages[name] = package_of(name)
        return packages[name]

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event != "call" or frame.f_back is None:
            return
        callee, caller = package(frame), package(frame.f_back)
        if callee and caller and callee != caller:
            counted[(caller, callee)] += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return counted


def create(folder: Path) -> Any:
    """Return the app of this checkout (either layout) on a Lite file in folder."""
    sys.path.insert(0, str(REPO))  # this checkout's code, not an installed one
    if (REPO / "acn").is_dir():
        from acn.common.settings import Settings
        from acn.server import create_app
    else:  # the flat layout of earlier commits
        from common.settings import Settings  # type: ignore[no-redef]

        from server import create_app  # type: ignore[no-redef]
    settings = Settings(milvus_uri=str(folder / "memory.db"), log_level="WARNING", cache_dir=str(folder / "cache"))
    return create_app(settings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", action="store_true", help="print every (caller, callee) pair")
    args = parser.parse_args()
    ns = {"agent_id": "walk", "session_id": "s1", "user_id": "u1"}
    with tempfile.TemporaryDirectory() as folder:
        app = create(Path(folder))
        client = app.test_client()

        def record() -> None:
            answer = client.post("/v1/nodes/record_turn", json={**ns, "messages": MESSAGES})
            assert answer.status_code == 200, answer.get_json()

        def assemble() -> None:
            body = {**ns, "user_input": "对账接口的超时是多少？", "max_tokens": 2000, "mode": "focused"}
            answer = client.post("/v1/nodes/assemble", json=body)
            assert answer.status_code == 200, answer.get_json()

        for name, action in (("record_turn", record), ("assemble", assemble)):
            action()  # warm-up: first-call work (model loads, caches) is not the walk
            counted = crossings(action)
            node_pipeline = sum(n for (a, b), n in counted.items() if "nodes" in (a, b) and a != "app" and b != "app")
            print(f"{name}: {sum(counted.values())} crossings, {node_pipeline} of them node <-> below, "
                  f"{len(counted)} distinct pairs")
            if args.pairs:
                for (caller, callee), n in counted.most_common():
                    print(f"  {caller} -> {callee}: {n}")
        app.extensions["acn"].close()


if __name__ == "__main__":
    main()
