"""Load the agent-strategy plugin with dify_plugin 0.10.2 and invoke its strategy the way the plugin daemon does.

Python 3.12 only (importing dify_plugin patches the process with gevent), so tests run this in a subprocess:
    run_agent_strategy.py PLUGIN_DIR --daemon-url URL --plan PLAN.json
PLAN.json: {"provider": ..., "strategy": ..., "runs": [{"parameters": {...}, "app_id", "conversation_id",
"user_id"}, ...]}. Each run is one Agent node execution through PluginExecutor.invoke_agent_strategy, with a
serverless-style session whose backwards invocations (model, tools) go over HTTP to URL: the test plays the
daemon there. Prints one JSON report: what the SDK loaded and, per run, the messages by kind or the error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("plugin_dir")
    parser.add_argument("--daemon-url", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args()
    plan = json.loads(Path(args.plan).read_text(encoding="utf-8"))
    os.chdir(args.plugin_dir)
    sys.path.insert(0, os.getcwd())
    report = load_declarations()
    executor = registration(report, plan)
    report["runs"] = [run(executor, plan, step, args.daemon_url) for step in plan["runs"]]
    print(json.dumps(report, ensure_ascii=False, default=str))
    return 0


def load_declarations() -> dict[str, Any]:
    """Validate manifest, provider and strategy YAMLs with the SDK's own models."""
    import yaml
    from dify_plugin.core.entities.plugin.setup import PluginConfiguration
    from dify_plugin.entities.agent import AgentStrategyProviderConfiguration

    def load(path: str) -> Any:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)

    manifest = PluginConfiguration(**load("manifest.yaml"))
    providers = [AgentStrategyProviderConfiguration(**load(path)) for path in manifest.plugins.agent_strategies]
    return {"plugin": {"name": manifest.name, "version": manifest.version,
                       "tools": list(manifest.plugins.tools),
                       "agent_strategies": list(manifest.plugins.agent_strategies),
                       "minimum_dify_version": manifest.meta.minimum_dify_version},
            "providers": [p.identity.name for p in providers],
            "strategies": {s.identity.name: {"parameters": {p.name: p.type.value for p in s.parameters},
                                             "features": [f.value for f in s.features]}
                           for p in providers for s in p.strategies}}


def registration(report: dict[str, Any], plan: dict[str, Any]) -> Any:
    from dify_plugin import DifyPluginEnv
    from dify_plugin.core.plugin_executor import PluginExecutor
    from dify_plugin.core.plugin_registration import PluginRegistration

    config = DifyPluginEnv()
    registered = PluginRegistration(config)
    found = registered.get_agent_strategy_cls(plan["provider"], plan["strategy"])
    report["registered_strategy"] = found.__name__ if found else None
    return PluginExecutor(config, registered)


def run(executor: Any, plan: dict[str, Any], step: dict[str, Any], daemon_url: str) -> dict[str, Any]:
    """One Agent node execution: invoke the strategy and sort its messages by kind."""
    from dify_plugin.config.config import InstallMethod
    from dify_plugin.core.entities.plugin.request import AgentInvokeRequest
    from dify_plugin.core.runtime import Session
    from dify_plugin.core.server.tcp.request_reader import TCPReaderWriter

    writer = TCPReaderWriter(host="", port=0, key="")
    session = Session(session_id=step.get("session", "s"), executor=ThreadPoolExecutor(max_workers=1),
                      reader=writer, writer=writer, install_method=InstallMethod.Serverless,
                      dify_plugin_daemon_url=daemon_url, conversation_id=step.get("conversation_id"),
                      app_id=step.get("app_id"), max_invocation_timeout=60)
    request = AgentInvokeRequest(agent_strategy_provider=plan["provider"], agent_strategy=plan["strategy"],
                                 agent_strategy_params=step["parameters"], user_id=step.get("user_id", "u"))
    result: dict[str, Any] = {"text": "", "json": [], "logs": [], "error": ""}
    try:
        for message in executor.invoke_agent_strategy(session, request):
            data = json.loads(json.dumps(message.model_dump(mode="json")))
            kind, body = data["type"], data["message"]
            if kind == "text":
                result["text"] += body["text"]
            elif kind == "json":
                result["json"].append(body["json_object"])
            elif kind == "log":
                result["logs"].append({"label": body["label"], "status": body["status"],
                                       "parent": body.get("parent_id") is not None, "error": body.get("error")})
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
    return result


if __name__ == "__main__":
    sys.exit(main())
