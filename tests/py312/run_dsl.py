"""Run a Dify DSL file with Dify's extracted workflow engine (graphon) and print the result as JSON.

Python 3.12 only (graphon's floor); the integration tests call this in a subprocess:
    run_dsl.py DSL --inputs '{...}' [--env '{"NAME": "value"}'] [--sandbox URL] [--llm-stand-in NODE_ID]
            [--inspect-only]
--env overrides environment-variable values the way a Dify user edits them in the app settings.
--llm-stand-in replaces one LLM node with a code node that has the same id and the same `text` output,
so the rest of a chatflow runs offline (graphon's LLM node needs a model plugin and credentials).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import yaml
from graphon.dsl import DslError, inspect, loads
from graphon.engine_events.graph import GraphRunFailedEvent, GraphRunSucceededEvent
from graphon.engine_events.node import NodeRunExceptionEvent, NodeRunFailedEvent, NodeRunSucceededEvent
from graphon.nodes.llm.entities import LLMNodeData
from graphon.nodes.tool.entities import ToolNodeData

# The stand-in's inputs are the rendered system and user prompts, so the run's node outputs show what the LLM
# would have received; it answers with a short acknowledgement of the user's last line.
STAND_IN_CODE = '''
def main(system: str, user: str) -> dict:
    return {"text": "好的，已收到：" + user.strip().splitlines()[-1]}
'''


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("dsl")
    parser.add_argument("--inputs", default="{}")
    parser.add_argument("--env", default="{}")
    parser.add_argument("--sandbox", default="")
    parser.add_argument("--llm-stand-in", default="")
    parser.add_argument("--inspect-only", action="store_true")
    args = parser.parse_args()
    with open(args.dsl, encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    override_env(document, json.loads(args.env))
    if args.llm_stand_in:
        replace_llm(document, args.llm_stand_in)
    text = yaml.safe_dump(document, allow_unicode=True, sort_keys=False)
    plan = inspect(text)
    result: dict[str, Any] = {"load_status": str(plan.load_status), "load_reason": plan.load_reason,
                              "node_types": sorted({n["data"]["type"] for n in document["workflow"]["graph"]["nodes"]})}
    result["validated_nodes"] = validate_node_data(document)
    if args.inspect_only:
        print(json.dumps(result, ensure_ascii=False))
        return 0
    credentials = {"code": {"execution_endpoint": args.sandbox, "execution_api_key": "test-sandbox-key"}}
    try:
        engine = loads(text, start_inputs=json.loads(args.inputs), credentials=credentials)
    except DslError as error:
        result.update(status="load_failed", error=str(error))
        print(json.dumps(result, ensure_ascii=False))
        return 0
    result.update(run(engine))
    print(json.dumps(result, ensure_ascii=False, default=str))
    return 0


def override_env(document: dict[str, Any], values: dict[str, str]) -> None:
    """Set environment-variable values; an unknown name is an error (the DSL must declare it)."""
    declared = {v["name"]: v for v in document["workflow"].get("environment_variables", [])}
    for name, value in values.items():
        if name not in declared:
            raise SystemExit(f"DSL declares no environment variable {name}")
        declared[name]["value"] = value


def replace_llm(document: dict[str, Any], node_id: str) -> None:
    """Swap the LLM node for a code node with the same id and output, fed the LLM's own prompt template."""
    node = next(n for n in document["workflow"]["graph"]["nodes"] if n["id"] == node_id)
    data = node["data"]
    assert data["type"] == "llm", f"{node_id} is a {data['type']} node"
    prompts = {p["role"]: p["text"] for p in data["prompt_template"]}
    variables = []
    for role in ("system", "user"):
        # The code node's inputs come from selectors, so the stand-in takes the template's variables as they
        # would be rendered: each role's template must be a single {{#node.var#}} reference or plain text.
        variables.append(selector_variable(role, prompts.get(role, "")))
    node["data"] = {"type": "code", "title": "LLM stand-in", "desc": "", "code_language": "python3",
                    "code": STAND_IN_CODE, "variables": variables,
                    "outputs": {"text": {"type": "string", "children": None}}}


def selector_variable(name: str, template: str) -> dict[str, Any]:
    import re

    refs = re.findall(r"\{\{#([a-zA-Z0-9_]+)\.([a-zA-Z0-9_]+)#\}\}", template)
    if len(refs) != 1:
        raise SystemExit(f"the stand-in needs exactly one variable in the {name} prompt, found {refs}")
    return {"variable": name, "value_selector": list(refs[0]), "value_type": "string"}


def validate_node_data(document: dict[str, Any]) -> list[str]:
    """Validate the nodes that need a model or the plugin daemon to run against graphon's own models."""
    models = {"llm": LLMNodeData, "tool": ToolNodeData}
    checked = []
    for node in document["workflow"]["graph"]["nodes"]:
        model = models.get(node["data"]["type"])
        if model is not None:
            model.model_validate(node["data"])
            checked.append(node["id"])
    return checked


def run(engine: Any) -> dict[str, Any]:
    outputs: dict[str, Any] = {}
    failures: list[dict[str, str]] = []
    status, error = "unknown", ""
    try:
        for event in engine.run():
            if isinstance(event, NodeRunSucceededEvent):
                outputs[event.node_id] = dict(event.node_run_result.outputs or {})
            elif isinstance(event, NodeRunFailedEvent | NodeRunExceptionEvent):
                failures.append({"node_id": event.node_id, "error": event.error})
            elif isinstance(event, GraphRunSucceededEvent):
                status = "succeeded"
                outputs["__graph__"] = dict(event.outputs)
            elif isinstance(event, GraphRunFailedEvent):
                status, error = "failed", event.error
    except Exception as exc:  # a node failing without an error strategy ends the run with an exception
        status, error = "failed", f"{type(exc).__name__}: {exc}"
    return {"status": status, "error": error, "node_outputs": outputs, "failures": failures}


if __name__ == "__main__":
    sys.exit(main())
