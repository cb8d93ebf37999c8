"""The Dify code-node snippets, run as plain Python against the real server: declared outputs, Dify's output
types and limits, and well under the sandbox's 15 s."""

from __future__ import annotations

import importlib.util
import json
import re
import time
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.conftest import ROOT
from tests.integration_support import LiveServer

pytest_plugins = ("tests.integration_fixtures",)

SNIPPETS = ROOT / "examples" / "dify" / "code_nodes"
SANDBOX_SECONDS = 15
MAX_STRING = 80_000  # CODE_MAX_STRING_LENGTH, Dify's default


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"snippet_{name}", SNIPPETS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def declared_outputs(name: str) -> set[str]:
    header = (SNIPPETS / f"{name}.py").read_text(encoding="utf-8").split("Output variables:", 1)[1]
    header = header.split("\n# The", 1)[0].split("\nimport", 1)[0]
    return set(re.findall(r"(\w+) \(", header))


def run(name: str, **inputs: Any) -> dict[str, Any]:
    started = time.monotonic()
    result = load(name).main(**inputs)
    assert time.monotonic() - started < SANDBOX_SECONDS / 3, f"{name} is too close to the sandbox timeout"
    assert set(result) == declared_outputs(name), f"{name}: returns what its header declares"
    for key, value in result.items():
        # Only scalar outputs: lists leave as JSON strings because of the 30-item array cap.
        assert isinstance(value, (str, int, float, bool)), f"{name}.{key} is {type(value).__name__}"
        assert not isinstance(value, str) or len(value) <= MAX_STRING
    return result


def test_snippets_record_retrieve_assemble_and_compact(live_server: LiveServer) -> None:
    auth = {"base_url": live_server.base_url, "api_key": live_server.api_key}
    ns = {"agent_id": "dify-code", "session_id": f"conv-{uuid.uuid4().hex[:8]}"}
    recorded = run("record_turn", **auth, **ns, user_message="我叫李雷，收货地址改成上海市浦东新区世纪大道100号",
                   assistant_message="好的，已将收货地址改为上海市浦东新区世纪大道100号。")
    assert recorded["version"] == 1 and recorded["turn"] == 1 and json.loads(recorded["memories_json"])
    found = run("retrieve_memory", **auth, **ns, query="我之前说的收货地址是哪里？")
    assert found["count"] >= 1 and "世纪大道100号" in found["text"]
    context = run("assemble_context", **auth, **ns, user_input="地址是哪里？", system_prompt="你是物流客服。")
    assert "世纪大道100号" in context["prompt"] and context["system_text"].startswith("你是物流客服。")
    assert json.loads(context["messages_json"])[-1] == {**json.loads(context["messages_json"])[-1],
                                                        "content": "地址是哪里？"}
    talk = [{"role": "user" if i % 2 == 0 else "assistant", "content": f"第{i}条：合同编号 HT-{7000 + i}"}
            for i in range(40)]
    compacted = run("compact_messages", **auth, messages_json=json.dumps(talk, ensure_ascii=False))
    assert compacted["tokens_after"] < compacted["tokens_before"]
    assert all(f"HT-{7000 + i}" in compacted["working_summary"] + compacted["recent_messages_json"]
               for i in range(40))


def test_snippets_carry_sys_user_id_into_the_users_next_conversation(live_server: LiveServer) -> None:
    auth = {"base_url": live_server.base_url, "api_key": live_server.api_key}
    agent, user = f"dify-code-{uuid.uuid4().hex[:8]}", "Dify 用户 42"  # not an identifier: hashed by the snippet
    run("record_turn", **auth, agent_id=agent, session_id="conv-1", user_id=user,
        user_message="我对花生过敏，推荐零食时别推含花生的", assistant_message="好的，记住了。")
    later = run("assemble_context", **auth, agent_id=agent, session_id="conv-2", user_id=user,
                user_input="给我推荐点零食吧", system_prompt="你是导购。")
    assert "花生过敏" in later["memory_text"]
    found = run("retrieve_memory", **auth, agent_id=agent, session_id="conv-3", user_id=user, query="我对什么过敏？")
    assert "花生过敏" in found["text"]
    stranger = run("assemble_context", **auth, agent_id=agent, session_id="conv-4", user_input="给我推荐点零食吧",
                   system_prompt="你是导购。")
    assert "花生" not in stranger["memory_text"]


def test_snippets_raise_with_the_servers_message(live_server: LiveServer) -> None:
    try:
        load("retrieve_memory").main(live_server.base_url, "wrong-key", "a", "s", "q")
    except RuntimeError as error:
        assert "HTTP 401" in str(error) and "invalid API key" in str(error)
    else:
        raise AssertionError("a rejected key must fail the code node")


def test_every_snippet_is_covered() -> None:
    assert {p.stem for p in Path(SNIPPETS).glob("*.py")} == {
        "record_turn", "retrieve_memory", "assemble_context", "compact_messages"}
