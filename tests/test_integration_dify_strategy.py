"""The "Agent that remembers" strategy under dify_plugin 0.10.2, with this test playing the plugin daemon.

The strategy runs in a 3.12 subprocess (tests/py312/run_agent_strategy.py) through PluginExecutor, against the
real server on loopback; its backwards invocations (model calls, tool calls) come over HTTP to a loopback
stand-in of the daemon here, answered by a scripted model that records every prompt it receives and a scripted
tool. Sixty Agent node runs make one conversation: a constraint at turn 5, a tool call every third turn.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from acn.integrations.generate import (
    AUTHOR,
    EXTERNAL_MEMORY_TOOLS,
    PLUGIN_DIR,
    STRATEGY_DIR,
    STRATEGY_NAME,
    STRATEGY_PLUGIN,
    TOOL_NODES,
)
from acn.integrations.package_dify import build, package_files
from acn.text.tokens import load_tokenizer
from tests.integration_support import LiveServer, run_py312
from tests.stand_in_http import serve_loopback

pytest_plugins = ("tests.integration_fixtures",)

TURNS = 60
BUDGET = 2000
CONSTRAINT = "从现在起，所有报价都必须用欧元，不要推荐红眼航班。"
INSTRUCTION = "你是旅行助理，回答简洁。"
TOKENIZER = load_tokenizer()


def usage(prompt_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "prompt_unit_price": "0", "prompt_price_unit": "0", "prompt_price": "0",
            "completion_tokens": 20, "completion_unit_price": "0", "completion_price_unit": "0",
            "completion_price": "0", "total_tokens": prompt_tokens + 20, "total_price": "0", "currency": "USD",
            "latency": 0.01}


def order_record(order_id: str) -> str:
    """A tool result far above the editing rule's 400 tokens: 30 line items."""
    items = [{"sku": f"SKU-{order_id}-{n:02d}", "name": f"行李配件第{n}号", "qty": n % 4 + 1, "price_eur": 10 + n}
             for n in range(30)]
    return json.dumps({"order_id": order_id, "status": "shipped", "items": items}, ensure_ascii=False)


@dataclass
class Daemon:
    """The daemon's side: the scripted model and tool, and what they received."""

    url: str = ""
    prompts: list[dict[str, Any]] = field(default_factory=list)  # {"turn", "messages", "tools"}
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    streamed: list[bool] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)  # {"request", "reply"}: compaction prompts

    def answer(self, kind: str, request: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
        """Return the response chunks for one backwards invocation, or an error message."""
        if kind == "llm" and "对话压缩器" in request["prompt_messages"][0]["content"]:
            if "压缩故障" in request["prompt_messages"][-1]["content"]:
                with self.lock:
                    self.compactions.append({"request": request, "reply": None, "summary": {}})
                return [], "model openai/gpt-4o: quota exceeded"
            return self.compact(request), ""
        if kind == "tool":
            self.tool_calls.append(request)
            if request["tool_parameters"].get("order_id") == "ORD-BROKEN":
                return [], "tool lookup_order: upstream returned HTTP 502"
            return [{"type": "text", "message": {"text": order_record(request["tool_parameters"]["order_id"])},
                     "meta": None}], ""
        messages = request["prompt_messages"]
        query = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        turn = int(m.group(1)) if (m := re.search(r"第(\d+)轮", query)) else 0
        with self.lock:
            self.prompts.append({"turn": turn, "messages": messages, "tools": request.get("tools") or []})
            self.streamed.append(bool(request.get("stream")))
        tokens = sum(TOKENIZER.count_message(m) for m in messages)
        if "模型故障" in query:
            return [], "model openai/gpt-4o: rate limit exceeded (429)"
        if messages[-1]["role"] == "tool":
            message = {"role": "assistant", "content": f"第{turn}轮：订单已查到，共 30 件，状态已发货。",
                       "tool_calls": []}
        elif "未知工具" in query:
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call-{turn}", "type": "function", "function": {"name": "drop_database", "arguments": "{}"}}]}
        elif "坏参数" in query:
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call-{turn}", "type": "function", "function": {"name": "lookup_order",
                                                                        "arguments": '{"order_id": "ORD-'}}]}
        elif "工具故障" in query:
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call-{turn}", "type": "function",
                 "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": "ORD-BROKEN"})}}]}
        elif turn % 3 == 0 and request.get("tools"):
            message = {"role": "assistant", "content": "", "tool_calls": [
                {"id": f"call-{turn}", "type": "function",
                 "function": {"name": "lookup_order", "arguments": json.dumps({"order_id": f"ORD-{turn:04d}"})}}]}
        else:
            message = {"role": "assistant", "content": f"第{turn}轮回答：" + "行程建议与注意事项已整理好，" * 6,
                       "tool_calls": []}
        # Streamed as a model provider does: the text in two pieces, the usage on the last chunk.
        half = len(message["content"]) // 2
        pieces = [{**message, "content": message["content"][:half], "tool_calls": []},
                  {**message, "content": message["content"][half:]}]
        return [{"model": "gpt-4o", "prompt_messages": [], "system_fingerprint": None,
                 "delta": {"index": i, "message": piece, "usage": usage(tokens) if i else None,
                           "finish_reason": "stop" if i else None}} for i, piece in enumerate(pieces)], ""


    def compact(self, request: dict[str, Any]) -> list[dict[str, Any]]:
        """Answer a compaction prompt as a faithful model would: the working state carried over, the goal from
        the first user line, one fact per user line; garbage when the conversation asks for it ("乱码")."""
        prompt = request["prompt_messages"][-1]["content"]
        users = re.findall(r"^第\d+轮 用户: (.*)$", prompt, re.MULTILINE)
        goal = re.search(r"^目标：(.*)$", prompt, re.MULTILINE)
        constraints = re.search(r"^约束：(.*)$", prompt, re.MULTILINE)
        summary = {"goal": goal.group(1) if goal and goal.group(1) != "（无）" else users[0][:24],
                   "constraints": [] if not constraints or constraints.group(1) == "（无）"
                   else constraints.group(1).split("；"),
                   "done": [], "todo": [], "decisions": [], "facts": [line[:20] for line in users], "key_numbers": {}}
        reply = "抱歉，我无法完成这个请求。" if "乱码" in prompt else json.dumps(summary, ensure_ascii=False)
        with self.lock:
            self.compactions.append({"request": request, "reply": reply, "summary": summary})
        return [{"model": "gpt-4o", "prompt_messages": [], "system_fingerprint": None,
                 "delta": {"index": 0, "message": {"role": "assistant", "content": reply, "tool_calls": []},
                           "usage": usage(100), "finish_reason": "stop"}}]


@contextmanager
def serving_daemon() -> Iterator[Daemon]:
    """The daemon's stand-in on loopback."""
    state = Daemon()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            envelope = json.loads(raw)  # StreamOutputMessage: {event: session, session_id, data: SessionMessage}
            invoke = envelope["data"]["data"]
            chunks, error = state.answer(invoke["type"], invoke["request"])
            rid, session = invoke["backwards_request_id"], envelope["session_id"]
            events = [{"backwards_request_id": rid, "event": "response", "message": "", "data": c} for c in chunks]
            events.append({"backwards_request_id": rid, "event": "error" if error else "end", "message": error,
                           "data": None})
            body = "".join(json.dumps({"session_id": session, "event": "backwards_response", "data": e},
                                      ensure_ascii=False) + "\n" for e in events).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-ndjson")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            """Keep the stub's access log out of the test output."""

    with serve_loopback(Handler) as url:
        state.url = url
        yield state


@pytest.fixture(scope="module")
def daemon() -> Iterator[Daemon]:
    with serving_daemon() as state:
        yield state


TOOL = {"identity": {"author": "langgenius", "name": "lookup_order", "label": {"en_US": "Lookup order"},
                     "provider": "orders"},
        "parameters": [{"name": "order_id", "label": {"en_US": "Order"}, "type": "string", "form": "llm",
                        "required": True, "llm_description": "The order id",
                        "human_description": {"en_US": "The order id"}}],
        "description": {"human": {"en_US": "Look up an order"}, "llm": "Look up an order by id"},
        "provider_type": "builtin", "runtime_parameters": {}}


def parameters(server: LiveServer, query: str, **extra: Any) -> dict[str, Any]:
    """The strategy's parameters as Dify's Agent node sends them (model selector and tools resolved)."""
    # No max_tokens: the budget defaults to half the model's context window (2 * BUDGET).
    entity = {"model": "gpt-4o", "label": {"en_US": "gpt-4o"}, "model_type": "llm",
              "features": ["tool-call", "multi-tool-call", "stream-tool-call"],
              "model_properties": {"mode": "chat", "context_size": 2 * BUDGET}}
    return {"model": {"provider": "openai", "model": "gpt-4o", "mode": "chat", "completion_params": {},
                      "history_prompt_messages": [], "entity": entity},
            "tools": [TOOL], "instruction": INSTRUCTION, "query": query, "maximum_iterations": 4,
            "base_url": server.base_url, "api_key": server.api_key, "assembly_mode": "auto", **extra}


def run_strategy(tmp: Path, daemon: Daemon, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Package the strategy plugin, unpack it, and run it under the SDK (one subprocess)."""
    with zipfile.ZipFile(build(tmp / "strategy.difypkg", STRATEGY_DIR)) as archive:
        archive.extractall(tmp / "unpacked")
    plan = tmp / "plan.json"
    plan.write_text(json.dumps({"provider": STRATEGY_PLUGIN, "strategy": STRATEGY_NAME, "runs": runs},
                               ensure_ascii=False), encoding="utf-8")
    report: dict[str, Any] = run_py312("run_agent_strategy.py", str(tmp / "unpacked"), "--daemon-url", daemon.url,
                                       "--plan", str(plan), timeout=900)
    return report


def query_of(turn: int) -> str:
    if turn == 5:
        return f"第{turn}轮：{CONSTRAINT}"
    if turn % 3 == 0:
        return f"第{turn}轮：帮我查一下订单 ORD-{turn:04d} 的状态。"
    return f"第{turn}轮：下周去成都出差，帮我看看第{turn}天的行程安排和交通建议。"


@dataclass
class Conversation:
    report: dict[str, Any]
    app: str
    conversation: str
    user: str


@pytest.fixture(scope="module")
def conversation(live_server: LiveServer, daemon: Daemon, tmp_path_factory: pytest.TempPathFactory) -> Conversation:
    tag = uuid.uuid4().hex[:8]
    app, conv, user = f"app-{tag}", f"conv-{tag}", f"user-{tag}"
    runs = [{"parameters": parameters(live_server, query_of(turn)), "app_id": app, "conversation_id": conv,
             "user_id": user} for turn in range(1, TURNS + 1)]
    # Then a model error and a tool error: each ends its run, and nothing of those turns is stored.
    runs += [{"parameters": parameters(live_server, f"第{TURNS + 1}轮：模型故障测试"), "app_id": app,
              "conversation_id": conv, "user_id": user},
             {"parameters": parameters(live_server, f"第{TURNS + 2}轮：工具故障测试"), "app_id": app,
              "conversation_id": conv, "user_id": user},
             {"parameters": parameters(live_server, f"第{TURNS + 3}轮：未知工具测试"), "app_id": app,
              "conversation_id": conv, "user_id": user},
             {"parameters": parameters(live_server, f"第{TURNS + 4}轮：坏参数测试"), "app_id": app,
              "conversation_id": conv, "user_id": user}]
    return Conversation(run_strategy(tmp_path_factory.mktemp("strategy"), daemon, runs), app, conv, user)


def plain_history_tokens(upto: int) -> int:
    """What a history-window strategy (cot_agent's FunctionCalling) would send on turn `upto`'s first call:
    the instruction, every earlier turn verbatim, the query."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": INSTRUCTION}]
    for turn in range(1, upto):
        messages.append({"role": "user", "content": query_of(turn)})
        if turn % 3 == 0:
            messages += [{"role": "assistant", "content": "", "tool_calls": [
                             {"id": f"call-{turn}", "type": "function", "function": {
                                 "name": "lookup_order", "arguments": json.dumps({"order_id": f"ORD-{turn:04d}"})}}]},
                         {"role": "tool", "content": order_record(f"ORD-{turn:04d}")},
                         {"role": "assistant", "content": f"第{turn}轮：订单已查到，共 30 件，状态已发货。"}]
        else:
            messages.append({"role": "assistant", "content": f"第{turn}轮回答：" + "行程建议与注意事项已整理好，" * 6})
    messages.append({"role": "user", "content": query_of(upto)})
    return sum(TOKENIZER.count_message(m) for m in messages)


def prompt_tokens(prompt: dict[str, Any]) -> int:
    return sum(TOKENIZER.count_message(m) for m in prompt["messages"])


def test_the_sdk_loads_the_strategy_plugin(conversation: Conversation) -> None:
    report = conversation.report
    assert report["registered_strategy"] == "AgentThatRemembersStrategy"
    assert report["plugin"]["tools"] == [] and report["plugin"]["agent_strategies"] == [
        f"provider/{STRATEGY_PLUGIN}.yaml"]
    strategy = report["strategies"][STRATEGY_NAME]
    assert strategy["parameters"]["model"] == "model-selector" and strategy["parameters"]["tools"] == "array[tools]"
    assert {"instruction", "query", "maximum_iterations", "max_tokens", "assembly_mode", "agent_id", "user_id",
            "session_id"} <= set(strategy["parameters"])
    assert strategy["features"] == []  # no history window: the server's session is the history


def test_sixty_turns_stay_under_the_budget_while_plain_history_outgrows_it(conversation: Conversation,
                                                                           daemon: Daemon) -> None:
    runs = conversation.report["runs"][:TURNS]
    assert [r["error"] for r in runs] == [""] * TURNS
    calls = [p for p in daemon.prompts if 1 <= p["turn"] <= TURNS]
    assert len(calls) == TURNS + TURNS // 3  # one call per turn, two on tool turns
    sent = [prompt_tokens(p) for p in calls]
    plain = [plain_history_tokens(turn) for turn in range(1, TURNS + 1)]
    print(f"\ntokens per call with the strategy: max {max(sent)}, last {sent[-1]}; plain history: turn 1 "
          f"{plain[0]}, turn 30 {plain[29]}, turn 60 {plain[-1]} (budget {BUDGET})")
    assert max(sent) <= BUDGET
    assert all(daemon.streamed)  # the model declares stream-tool-call: every call streams
    assert plain[-1] > 3 * BUDGET and sum(t > BUDGET for t in plain) > TURNS // 2


def test_the_turn_5_constraint_is_in_the_prompt_at_turn_55(conversation: Conversation, daemon: Daemon) -> None:
    # The prompts are the conversation's (asked for here, so the test runs, or skips, on its own as well).
    at_55 = [p for p in daemon.prompts if p["turn"] == 55]
    assert at_55 and all(CONSTRAINT in json.dumps(p["messages"], ensure_ascii=False) for p in at_55)
    # Not by keeping everything: turn 6's answer is long gone from the prompt.
    assert "第6轮回答" not in json.dumps(at_55[0]["messages"], ensure_ascii=False)


def test_tool_results_of_a_run_reach_the_model_and_the_rounds_are_logged(conversation: Conversation,
                                                                           daemon: Daemon) -> None:
    second = next(p for p in daemon.prompts if p["turn"] == 30 and p["messages"][-1]["role"] == "tool")
    assert second["messages"][-1]["content"] == order_record("ORD-0030")  # the latest round whole
    assert second["messages"][-2]["tool_calls"][0]["function"]["name"] == "lookup_order"
    run_30 = conversation.report["runs"][29]
    labels = [log["label"] for log in run_30["logs"]]
    assert labels.count("ROUND 1") == 2 and labels.count("ROUND 2") == 2  # start and finish of each round
    assert "CALL lookup_order" in labels and "gpt-4o Thought" in labels
    assert run_30["text"] == "第30轮：订单已查到，共 30 件，状态已发货。"
    assert run_30["json"][-1]["memory"]["turn"] == 30


def test_every_turn_is_stored_once_and_old_tool_results_are_shrunk(conversation: Conversation,
                                                                  live_server: LiveServer) -> None:
    ns = {"agent_id": conversation.app, "session_id": conversation.conversation}
    state = live_server.post("session_state", ns)
    assert state.status_code == 200, state.text
    assert state.json()["turn"] == TURNS  # the four failed runs stored nothing
    archived = requests.get(f"{live_server.base_url}/v1/memories", timeout=60,
                            params={**ns, "kinds": "turn", "limit": 1000},
                            headers={"Authorization": f"Bearer {live_server.api_key}"}).json()["memories"]
    users = sorted(m["turn_range"][0] for m in archived if m["meta"]["role"] == "user")
    assert users == list(range(1, TURNS + 1))
    buffer = state.json()["buffer"]
    raw = TOKENIZER.count(order_record(f"ORD-{TURNS:04d}"))
    # record_turn's edit rules keep the last two turns whole (protect_last) and shrink older tool results.
    old_tools = [m for m in buffer if m["role"] == "tool" and m["turn"] <= TURNS - 2]
    assert old_tools and all(TOKENIZER.count(m["content"]) < raw / 2 for m in old_tools)
    latest = [m for m in buffer if m["role"] == "tool" and m["turn"] == TURNS]
    assert [TOKENIZER.count(m["content"]) for m in latest] == [raw]
    # Compaction ran at its trigger: the older turns are a segment whose constraints keep the turn-5 rule.
    segments = state.json()["segments"]
    assert segments and any(CONSTRAINT.rstrip("。") in c for s in segments for c in s["constraints"])


def test_a_model_or_tool_error_ends_the_run_with_a_clear_message(conversation: Conversation) -> None:
    model_error, tool_error, unknown_tool, bad_arguments = conversation.report["runs"][TURNS:]
    assert unknown_tool["error"].startswith("AgentRunError: Agent that remembers: the model called 'drop_database'")
    assert "not JSON" in bad_arguments["error"] and "nothing stored" in bad_arguments["error"]
    assert model_error["error"].startswith("AgentRunError: Agent that remembers: the model call failed, nothing "
                                           "stored") and "rate limit exceeded (429)" in model_error["error"]
    assert tool_error["error"].startswith("AgentRunError: Agent that remembers: tool lookup_order failed, nothing "
                                          "stored") and "HTTP 502" in tool_error["error"]
    assert any(log["status"] == "error" for log in model_error["logs"])
    assert any(log["label"] == "CALL lookup_order" and log["status"] == "error" for log in tool_error["logs"])


def test_the_two_packages_hold_what_the_daemon_accepts(tmp_path: Path) -> None:
    """The daemon refuses a plugin declaring tools and agent strategies together: two packages, one each."""
    with zipfile.ZipFile(build(tmp_path / "tools.difypkg")) as archive:
        tools = set(archive.namelist())
    with zipfile.ZipFile(build(tmp_path / "strategy.difypkg", STRATEGY_DIR)) as archive:
        strategy = set(archive.namelist())
    assert {f"tools/{t}.{ext}" for t in EXTERNAL_MEMORY_TOOLS for ext in ("py", "yaml")} <= tools
    assert {f"tools/{t}.yaml" for t in TOOL_NODES} <= tools
    assert {"manifest.yaml", "main.py", "acn_client.py", "_assets/icon.svg", "PRIVACY.md",
            f"provider/{STRATEGY_PLUGIN}.yaml", f"provider/{STRATEGY_PLUGIN}.py",
            f"strategies/{STRATEGY_NAME}.yaml", f"strategies/{STRATEGY_NAME}.py"} <= strategy
    manifests = [yaml.safe_load((d / "manifest.yaml").read_text(encoding="utf-8")) for d in (PLUGIN_DIR, STRATEGY_DIR)]
    for manifest in manifests:
        assert manifest["author"] == AUTHOR and manifest["meta"]["minimum_dify_version"] == "1.9.0"
        assert len([kind for kind in ("tools", "agent_strategies") if manifest["plugins"].get(kind)]) == 1
    assert manifests[1]["resource"]["permission"]["model"] == {"enabled": True, "llm": True}


# dify-plugin-daemon's agent_declaration.go: the parameter types an agent strategy may declare.
DAEMON_STRATEGY_TYPES = {"string", "number", "boolean", "select", "secret-input", "file", "files", "app-selector",
                         "model-selector", "array[tools]", "any"}


def test_the_strategy_declaration_follows_the_daemon_rules() -> None:
    def load(path: Path) -> Any:
        return yaml.safe_load(path.read_text(encoding="utf-8"))

    manifest = load(STRATEGY_DIR / "manifest.yaml")
    assert re.fullmatch(r"[a-z0-9_-]{1,128}", manifest["name"]) and manifest["type"] == "plugin"
    assert manifest["meta"]["runner"] == {"language": "python", "version": "3.12", "entrypoint": "main"}
    assert set(manifest["plugins"]) == {"agent_strategies"}
    # The privacy note and icon come from the tool plugin's folder (their one source) when the package is built.
    packaged = package_files(STRATEGY_DIR)
    assert packaged[manifest["privacy"]].is_file() and packaged[f"_assets/{manifest['icon']}"].is_file()
    provider = load(STRATEGY_DIR / manifest["plugins"]["agent_strategies"][0])
    assert provider["identity"]["author"] == AUTHOR and (STRATEGY_DIR / provider["extra"]["python"]["source"]).is_file()
    for path in provider["strategies"]:
        strategy = load(STRATEGY_DIR / path)
        assert (STRATEGY_DIR / strategy["extra"]["python"]["source"]).is_file()
        for parameter in strategy["parameters"]:
            assert parameter["type"] in DAEMON_STRATEGY_TYPES, parameter
            assert parameter["label"]["en_US"] and parameter["label"]["zh_Hans"]
        # The server key is a secret input (masked in the editor), never a plain string.
        kinds = {p["name"]: p["type"] for p in strategy["parameters"]}
        assert kinds["api_key"] == "secret-input" and kinds["base_url"] == "string"


# -- the user's own model for compaction (compaction_model: agent_model) ---------------------------------------------

COMPACTION_TURNS = 8  # about 480 tokens a turn: record_turn's default trigger (3,200 tokens) is reached at turn 7


def long_query(turn: int, marker: str = "") -> str:
    return f"第{turn}轮：{marker}请记录第{turn}天的成都会议安排，" + "会议室在高新区，交通以地铁为主，午餐在园区食堂，" * 12


@dataclass
class AgentModelRuns:
    report: dict[str, Any]
    daemon: Daemon
    faithful: dict[str, str]  # namespace of the conversation whose model answers the compaction prompts well
    garbage: dict[str, str]  # ... and of the one whose model answers them with prose
    failing: dict[str, str]  # ... and of the one whose model fails on them


@pytest.fixture(scope="module")
def agent_model_runs(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentModelRuns]:
    tag = uuid.uuid4().hex[:8]
    runs = []
    for conv, marker in ((f"faithful-{tag}", ""), (f"garbage-{tag}", "（乱码）"), (f"failing-{tag}", "（压缩故障）")):
        runs += [{"parameters": parameters(live_server, long_query(turn, marker), tools=[],
                                           compaction_model="agent_model"),
                  "app_id": f"app-{tag}", "conversation_id": conv, "user_id": f"user-{tag}"}
                 for turn in range(1, COMPACTION_TURNS + 1)]
    with serving_daemon() as daemon:
        report = run_strategy(tmp_path_factory.mktemp("agent-model"), daemon, runs)
        yield AgentModelRuns(report, daemon, {"agent_id": f"app-{tag}", "session_id": f"faithful-{tag}"},
                             {"agent_id": f"app-{tag}", "session_id": f"garbage-{tag}"},
                             {"agent_id": f"app-{tag}", "session_id": f"failing-{tag}"})


def test_the_agent_model_writes_the_compaction_segment(agent_model_runs: AgentModelRuns,
                                                        live_server: LiveServer) -> None:
    runs = agent_model_runs.report["runs"][:COMPACTION_TURNS]
    assert [r["error"] for r in runs] == [""] * COMPACTION_TURNS
    memories = [r["json"][-1]["memory"] for r in runs]
    # Turn 7 reaches the trigger: the strategy answers the server's prompt with the node's model, one round.
    assert [(m["compacted"], m["compaction_engine"], m["fallback_reason"]) for m in memories[5:7]] == [
        (False, "none", None), (True, "llm", None)]
    asked = [c for c in agent_model_runs.daemon.compactions
             if not re.search("乱码|压缩故障", c["request"]["prompt_messages"][-1]["content"])]
    assert len(asked) == 1
    request = asked[0]["request"]
    assert request["stream"] is False and not request["tools"] and request["model"] == "gpt-4o"
    assert [m["role"] for m in request["prompt_messages"]] == ["system", "user"]
    assert "请将下面第1-3轮对话压缩为结构化摘要" in request["prompt_messages"][1]["content"]
    labels = [log["label"] for log in runs[6]["logs"]]
    assert labels.count("COMPACTION") == 2 and "COMPACTION" not in [log["label"] for log in runs[5]["logs"]]
    state = live_server.post("session_state", agent_model_runs.faithful).json()
    reply = asked[0]["summary"]
    (segment,) = state["segments"]
    assert (segment["turn_range"], segment["goal"], segment["facts"]) == ([1, 3], reply["goal"], reply["facts"])
    assert segment["facts"] == [long_query(turn)[:20] for turn in (1, 2, 3)]
    assert state["turn"] == COMPACTION_TURNS


def test_a_garbage_compaction_reply_falls_back_to_extractive(agent_model_runs: AgentModelRuns,
                                                             live_server: LiveServer) -> None:
    runs = agent_model_runs.report["runs"][COMPACTION_TURNS:2 * COMPACTION_TURNS]
    assert [r["error"] for r in runs] == [""] * COMPACTION_TURNS
    memory = runs[6]["json"][-1]["memory"]
    assert (memory["compacted"], memory["compaction_engine"], memory["fallback_reason"]) == (
        True, "extractive", "LLM failed: LLM reply content is not valid JSON")
    # Every compaction of this conversation asked the model once and fell back (turn 8's too: the extractive
    # summary of turns 1-3 leaves the history over the trigger).
    compacted = [r["json"][-1]["memory"] for r in runs if r["json"][-1]["memory"]["compacted"]]
    garbage = [c for c in agent_model_runs.daemon.compactions if c["reply"] == "抱歉，我无法完成这个请求。"]
    assert len(garbage) == len(compacted) and {m["compaction_engine"] for m in compacted} == {"extractive"}
    state = live_server.post("session_state", agent_model_runs.garbage).json()
    segment = state["segments"][0]
    assert segment["turn_range"] == [1, 3] and segment["facts"] != garbage[0]["summary"]["facts"]
    assert state["turn"] == COMPACTION_TURNS


def test_a_failing_compaction_model_leaves_the_turn_stored_and_the_compaction_due(agent_model_runs: AgentModelRuns,
                                                                                  live_server: LiveServer) -> None:
    runs = agent_model_runs.report["runs"][2 * COMPACTION_TURNS:]
    assert [r["error"] for r in runs] == [""] * COMPACTION_TURNS  # the answer was given and the turn stored
    assert [r["json"][-1]["memory"]["compacted"] for r in runs] == [False] * COMPACTION_TURNS
    # Asked at turn 7 and again at turn 8 (still due): each time the COMPACTION log ends in an error.
    failed = [c for c in agent_model_runs.daemon.compactions if c["reply"] is None]
    assert len(failed) == 2
    assert [log["status"] for log in runs[6]["logs"] if log["label"] == "COMPACTION"] == ["start", "error"]
    state = live_server.post("session_state", agent_model_runs.failing).json()
    assert (state["turn"], state["segments"]) == (COMPACTION_TURNS, [])
