"""Load the Dify plugin with dify_plugin 0.10.2 and invoke every tool the way the plugin daemon does.

Python 3.12 only; importing dify_plugin monkey-patches the process with gevent, so the integration tests run
this in a subprocess:
    check_dify_plugin.py PLUGIN_DIR --base-url URL --api-key KEY --plan PLAN.json
PLAN.json is a list of {"tool": name, "parameters": {...}}, invoked in order against the live server.
Prints one JSON report: what the SDK loaded, the credential checks and each invocation's messages.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("plugin_dir")
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--api-key", required=True)
    parser.add_argument("--plan", required=True)
    args = parser.parse_args()
    plan = json.loads(Path(args.plan).read_text(encoding="utf-8"))
    # The SDK resolves YAML paths against the working directory and imports classes from it.
    os.chdir(args.plugin_dir)
    sys.path.insert(0, os.getcwd())
    report = load_declarations()
    executor, provider = registration(report)
    credentials = {"base_url": args.base_url, "api_key": args.api_key}
    report["credentials"] = check_credentials(executor, provider, credentials)
    report["invocations"] = [invoke(executor, provider, credentials, step, report["output_schemas"])
                             for step in plan]
    print(json.dumps(report, ensure_ascii=False, default=str))
    return 0


def load_declarations() -> dict[str, Any]:
    """Validate manifest, provider and tool YAMLs with the SDK's own models."""
    import yaml
    from dify_plugin.core.entities.plugin.setup import PluginConfiguration
    from dify_plugin.entities.tool import ToolConfiguration, ToolProviderConfiguration

    def load(path: str) -> Any:
        with open(path, encoding="utf-8") as handle:
            return yaml.safe_load(handle)

    manifest = PluginConfiguration(**load("manifest.yaml"))
    providers = [ToolProviderConfiguration(**load(path)) for path in manifest.plugins.tools]
    tools: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for provider in providers:
        for tool in provider.tools:
            ToolConfiguration.model_validate(tool.model_dump())
            tools[tool.identity.name] = {
                "labels": tool.identity.label.model_dump(exclude_none=True),
                "parameters": {p.name: {"type": p.type.value, "form": p.form.value, "required": p.required}
                               for p in tool.parameters},
            }
            schemas[tool.identity.name] = tool.output_schema or {}
    return {"plugin": {"name": manifest.name, "author": manifest.author, "version": manifest.version},
            "providers": [p.identity.name for p in providers], "tools": tools, "output_schemas": schemas}


def registration(report: dict[str, Any]) -> tuple[Any, str]:
    """Load the whole plugin (YAML, classes, _assets) with PluginRegistration; return an executor."""
    from dify_plugin import DifyPluginEnv
    from dify_plugin.core.plugin_executor import PluginExecutor
    from dify_plugin.core.plugin_registration import PluginRegistration

    config = DifyPluginEnv()
    registered = PluginRegistration(config)
    provider = report["providers"][0]
    report["registered_tools"] = sorted(t for t in report["tools"] if registered.get_tool_cls(provider, t))
    report["assets"] = sorted(registered.files_mapping) if hasattr(registered, "files_mapping") else []
    return PluginExecutor(config, registered), provider


def check_credentials(executor: Any, provider: str, credentials: dict[str, str]) -> dict[str, Any]:
    """Validate good and bad credentials through the executor, as Dify does when a user saves them."""
    from dify_plugin.core.entities.plugin.request import ToolValidateCredentialsRequest
    from dify_plugin.core.runtime import Session

    def attempt(values: dict[str, str]) -> str:
        request = ToolValidateCredentialsRequest(provider=provider, credentials=values, user_id="u-test")
        try:
            executor.validate_tool_provider_credentials(Session.empty_session(), request)
        except Exception as error:  # the daemon reports any exception as a failed validation
            return f"{type(error).__name__}: {error}"
        return "ok"

    return {"good": attempt(credentials), "bad_key": attempt({**credentials, "api_key": "wrong-key"}),
            "bad_url": attempt({**credentials, "base_url": "ftp://nowhere"})}


def invoke(executor: Any, provider: str, credentials: dict[str, str], step: dict[str, Any],
           schemas: dict[str, Any]) -> dict[str, Any]:
    """Invoke one tool through PluginExecutor.invoke_tool and sort its messages by kind."""
    import jsonschema
    from dify_plugin.core.entities.plugin.request import ToolInvokeRequest
    from dify_plugin.core.runtime import Session

    request = ToolInvokeRequest(provider=provider, tool=step["tool"], credentials=credentials,
                                tool_parameters=step["parameters"], user_id="u-test")
    result: dict[str, Any] = {"tool": step["tool"], "json": [], "variables": {}, "text": [], "error": ""}
    try:
        for message in executor.invoke_tool(Session.empty_session(), request):
            # The plugin sends each message to the daemon as JSON; round-trip it the same way.
            data = json.loads(json.dumps(message.model_dump(mode="json")))
            kind, body = data["type"], data["message"]
            if kind == "json":
                result["json"].append(body["json_object"])
            elif kind == "variable":
                result["variables"][body["variable_name"]] = body["variable_value"]
            elif kind == "text":
                result["text"].append(body["text"])
    except Exception as error:
        result["error"] = f"{type(error).__name__}: {error}"
        return result
    declared = schemas[step["tool"]].get("properties", {})
    result["missing_outputs"] = sorted(set(declared) - set(result["variables"]))
    result["undeclared_outputs"] = sorted(set(result["variables"]) - set(declared))
    result["schema_errors"] = [f"{name}: {error.message}" for name, value in result["variables"].items()
                               if name in declared
                               for error in jsonschema.Draft7Validator(declared[name]).iter_errors(value)]
    return result


if __name__ == "__main__":
    sys.exit(main())
