"""Agent that remembers: a function-calling agent whose every model call is assembled by the Agent Context Nodes
server under a token budget (identity → memory → working state → recent turns → input), instead of Dify's raw
history window. The model and the tools run through Dify (backwards invocation); the server never receives a Dify
credential. The turn (user query, tool calls and results, answer) is stored once through record_turn, after the
answer: a model or tool error ends the run with a message and stores nothing of the turn.

With compaction_model agent_model, the compaction's LLM is the node's own model: record_turn runs with the server's
engine "caller", and when compaction is due the strategy answers the server's prompts (needs_llm) with
session.model.llm.invoke, round by round, pinned to the session's version. The server checks each reply as it
checks its own endpoint's (grounding self-check, extractive fallback); it never sees a Dify credential.
"""

import json
import time
from collections.abc import Generator, Mapping
from typing import Any

from dify_plugin.entities.agent import AgentInvokeMessage
from dify_plugin.entities.model import ModelFeature, ModelPropertyKey
from dify_plugin.entities.model.llm import LLMModelConfig, LLMResult, LLMUsage
from dify_plugin.entities.model.message import (
    AssistantPromptMessage,
    PromptMessage,
    PromptMessageTool,
    SystemPromptMessage,
    ToolPromptMessage,
    UserPromptMessage,
)
from dify_plugin.entities.tool import ToolInvokeMessage, ToolProviderType
from dify_plugin.interfaces.agent import AgentModelConfig, AgentStrategy, ToolEntity
from pydantic import BaseModel, Field

from acn_client import NodeCallError, call_node

# Without an explicit budget the assembled context takes this share of the model's context window (the rest is
# left for tool declarations and the answer); without a known window, DEFAULT_BUDGET tokens.
WINDOW_SHARE = 0.5
DEFAULT_BUDGET = 8000
# The assembled history never gets less than this, even when this run's tool results are large.
MIN_HISTORY_BUDGET = 256
# This run's tool results older than the latest round are shrunk by the server's editing rule above this size.
MAX_TOOL_RESULT_TOKENS = 400
# The server refuses a compaction reply longer than this (acn/compaction/caller.py): a longer one is cut, and the
# server then finds it malformed and falls back to its extractive summary.
MAX_REPLY_CHARS = 100_000
START = ToolInvokeMessage.LogMessage.LogStatus.START
ERROR = ToolInvokeMessage.LogMessage.LogStatus.ERROR


class AgentRunError(Exception):
    """The run cannot go on (model, tool or server error); nothing of the turn is stored."""


class Params(BaseModel):
    query: str
    instruction: str | None = ""
    model: AgentModelConfig
    tools: list[ToolEntity] | None = None
    maximum_iterations: int = 5
    base_url: str
    api_key: str | None = None
    agent_id: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    max_tokens: int | None = Field(default=None, ge=64)
    assembly_mode: str | None = "auto"
    compaction_model: str | None = "server"


class AgentThatRemembersStrategy(AgentStrategy):
    def _invoke(self, parameters: dict[str, Any]) -> Generator[AgentInvokeMessage, None, None]:
        params = Params(**{k: v for k, v in parameters.items() if v is not None and v != ""})
        credentials = {"base_url": params.base_url, "api_key": params.api_key or ""}
        namespace = self._namespace(params)
        budget = self._budget(params)
        tools = {tool.identity.name: tool for tool in params.tools or []}
        prompt_tools = self._init_prompt_tools(list(tools.values()))
        usage: dict[str, LLMUsage | None] = {"usage": None}
        thoughts: list[dict[str, Any]] = []  # this run's assistant tool calls and tool results, OpenAI shape
        answer = ""
        for step in range(1, params.maximum_iterations + 1):
            started = time.perf_counter()
            round_log = self.create_log_message(label=f"ROUND {step}", data={}, status=START,
                                                metadata={"started_at": started})
            yield round_log
            try:
                prompt, tokens = self._assemble(credentials, namespace, params, budget, thoughts)
            except NodeCallError as error:
                yield self._fail(round_log, started, f"context assembly failed: {error}")
                raise AgentRunError(f"Agent that remembers: context assembly failed, nothing stored: {error}") \
                    from None
            model_log = self.create_log_message(label=f"{params.model.model} Thought", parent=round_log,
                                                data={"prompt_tokens": tokens, "budget": budget}, status=START,
                                                metadata={"started_at": time.perf_counter(),
                                                          "provider": params.model.provider})
            yield model_log
            last = step == params.maximum_iterations
            try:
                text, calls, call_usage = yield from self._call_model(params, prompt, prompt_tools, last)
            except Exception as error:  # the daemon's error for a failed model call is a plain Exception
                yield self._fail(round_log, started, f"model call failed: {error}")
                raise AgentRunError(f"Agent that remembers: the model call failed, nothing stored: {error}") \
                    from None
            if call_usage:
                self.increase_usage(usage, call_usage)
            yield self.finish_log_message(log=model_log, data={
                "output": text, "tool_name": ";".join(c[1] for c in calls),
                "tool_input": [{"name": c[1], "args": c[2]} for c in calls], "prompt_tokens": tokens},
                metadata={"started_at": started, "finished_at": time.perf_counter(),
                          "provider": params.model.provider,
                          "total_tokens": call_usage.total_tokens if call_usage else 0})
            if not calls or last:
                answer = text
                yield self.finish_log_message(log=round_log, data={"output": {"llm_response": text}},
                                              metadata={"started_at": started, "finished_at": time.perf_counter()})
                break
            thoughts.append({"role": "assistant", "content": text, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}
                for call_id, name, args in calls]})
            results = []
            for call_id, name, args in calls:
                result = yield from self._call_tool(round_log, tools, call_id, name, args)
                thoughts.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": result})
                results.append({"tool_call_id": call_id, "tool_call_name": name, "tool_response": result})
            yield self.finish_log_message(log=round_log, data={"output": {"llm_response": text,
                                                                          "tool_responses": results}},
                                          metadata={"started_at": started, "finished_at": time.perf_counter()})
        turn = [{"role": "user", "content": params.query}, *thoughts, {"role": "assistant", "content": answer}]
        by_agent_model = params.compaction_model == "agent_model"
        body: dict[str, Any] = {**namespace, "messages": turn}
        if by_agent_model:
            body["compaction"] = {"engine": "caller"}
        try:
            recorded = call_node(credentials, "record_turn", body)
        except NodeCallError as error:
            raise AgentRunError(f"Agent that remembers: the answer was given but the turn was not stored: "
                                f"{error}") from None
        compaction = recorded["compaction"]
        if by_agent_model and compaction["reason"] == "needs_llm":
            compaction = yield from self._compact_with_agent_model(credentials, namespace, params, recorded)
        yield self.create_json_message({"execution_metadata": self._metadata(usage["usage"]),
                                        "memory": {"turn": recorded["turn"], **namespace,
                                                   "compacted": compaction["compacted"],
                                                   "compaction_engine": compaction["engine_used"],
                                                   "fallback_reason": compaction.get("fallback_reason")}})

    # -- pieces ------------------------------------------------------------------------------

    def _compact_with_agent_model(self, credentials: Mapping[str, str], namespace: dict[str, str], params: Params,
                                  recorded: dict[str, Any]) -> Generator[AgentInvokeMessage, None, dict[str, Any]]:
        """Answer the server's compaction prompts with the node's model until the compaction is done; return the
        compact answer. The turn is already stored: a failure here leaves the compaction to a later turn (it is
        still due then) and never fails the run."""
        started = time.perf_counter()
        log = self.create_log_message(label="COMPACTION", data={}, status=START,
                                      metadata={"started_at": started, "provider": params.model.provider})
        yield log
        prompt = recorded["compaction"]["prompt"]
        # The prompts belong to this version of the session: a run that moved it meanwhile makes the server
        # answer 409, and the compaction waits for the next turn.
        body = {**namespace, "engine": "caller", "expected_version": recorded["version"]}
        replies: list[dict[str, str]] = []
        try:
            for _ in range(int(prompt["max_rounds"])):
                replies.append({"id": prompt["id"], "content": self._ask_model(params, prompt)[:MAX_REPLY_CHARS]})
                result = call_node(credentials, "compact", {**body, "llm_replies": replies})
                if result["status"] != "needs_llm":
                    break
                prompt = result["prompt"]
            else:
                raise NodeCallError(f"the compaction asked for more than {prompt['max_rounds']} replies")
        except Exception as error:  # the daemon's model error is a plain Exception; NodeCallError for the server
            yield self._fail(log, started, f"compaction with the agent's model did not finish: {error}")
            return {"compacted": False, "engine_used": "none", "fallback_reason": None}
        yield self.finish_log_message(log=log, data={"output": {
            "rounds": len(replies), "engine_used": result["engine_used"],
            "fallback_reason": result.get("fallback_reason"), "segments": len(result["segments"])}},
            metadata={"started_at": started, "finished_at": time.perf_counter(),
                      "provider": params.model.provider})
        return dict(result)

    def _ask_model(self, params: Params, prompt: Mapping[str, Any]) -> str:
        """Return the node's model's answer (non-streaming, no tools) to one compaction prompt."""
        config = LLMModelConfig(**params.model.model_dump(mode="json"))
        result = self.session.model.llm.invoke(
            model_config=config, stream=False, tools=[], stop=[],
            prompt_messages=[SystemPromptMessage(content=prompt["system"]), UserPromptMessage(content=prompt["user"])])
        content = result.message.content
        return content if isinstance(content, str) else "".join(getattr(part, "data", "") for part in content or [])

    def _namespace(self, params: Params) -> dict[str, str]:
        """Agent = the app, user = Dify's user, session = the conversation, unless the node sets them."""
        agent = params.agent_id or self.session.app_id or "dify-agent"
        session = params.session_id or self.session.conversation_id or f"run-{int(time.time() * 1000)}"
        namespace = {"agent_id": agent, "session_id": session}
        user = params.user_id or self.runtime.user_id
        if user:
            namespace["user_id"] = user
        return namespace

    @staticmethod
    def _budget(params: Params) -> int:
        """The node's max_tokens, else a share of the model's context window."""
        if params.max_tokens:
            return params.max_tokens
        entity = params.model.entity
        window = entity.model_properties.get(ModelPropertyKey.CONTEXT_SIZE) if entity else None
        return int(int(window) * WINDOW_SHARE) if window else DEFAULT_BUDGET

    def _assemble(self, credentials: Mapping[str, str], namespace: dict[str, str], params: Params, budget: int,
                  thoughts: list[dict[str, Any]]) -> tuple[list[PromptMessage], int]:
        """Return the prompt for this iteration and its token count: the assembled context (under what the budget
        leaves after this run's tool rounds) followed by those rounds, older tool results shrunk."""
        rounds, thought_tokens = self._edited_thoughts(credentials, thoughts)
        body = {**namespace, "system_prompt": params.instruction or "", "user_input": params.query,
                "max_tokens": max(MIN_HISTORY_BUDGET, budget - thought_tokens),
                "mode": params.assembly_mode or "auto"}
        assembled = call_node(credentials, "assemble", body)
        messages = [*assembled["messages"], *rounds]
        return [to_prompt_message(m) for m in messages], int(assembled["tokens"]["total"]) + thought_tokens

    @staticmethod
    def _edited_thoughts(credentials: Mapping[str, str],
                         thoughts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
        """Return this run's rounds with tool results before the latest round shrunk (never a call without its
        result: only contents change), and their token count by the server's tokenizer."""
        if not thoughts:
            return [], 0
        latest = max(i for i, m in enumerate(thoughts) if m["role"] == "assistant")
        rules = {"drop_pleasantries": False, "dedupe": False, "max_tool_result_tokens": MAX_TOOL_RESULT_TOKENS}
        older = call_node(credentials, "edit_context", {"messages": thoughts[:latest], "rules": rules,
                                                        "protect_last": 0}) if latest else None
        # The latest round goes to the model whole; the call only counts its tokens (every rule off).
        recent = call_node(credentials, "edit_context", {"messages": thoughts[latest:],
                                                         "rules": {"drop_pleasantries": False, "dedupe": False,
                                                                   "max_tool_result_tokens": None},
                                                         "protect_last": 0})
        kept = [*(older["messages"] if older else []), *recent["messages"]]
        tokens = (older["tokens_after"] if older else 0) + recent["tokens_after"]
        return [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")
                 and v is not None} for m in kept], int(tokens)

    def _call_model(self, params: Params, prompt: list[PromptMessage], prompt_tools: list[PromptMessageTool],
                    last: bool) -> Generator[AgentInvokeMessage, None, tuple[str, list[tuple[str, str, Any]],
                                                                              LLMUsage | None]]:
        """Call the user's Dify model; stream the answer's text; return text, tool calls and usage."""
        model = params.model
        stream = bool(model.entity and model.entity.features
                      and ModelFeature.STREAM_TOOL_CALL in model.entity.features)
        stop = (model.completion_params or {}).get("stop", [])
        config = LLMModelConfig(**model.model_dump(mode="json"))
        result = self.session.model.llm.invoke(model_config=config, prompt_messages=prompt, stop=stop,
                                               stream=stream, tools=[] if last else prompt_tools)
        text = ""
        calls: list[tuple[str, str, Any]] = []
        usage: LLMUsage | None = None
        if isinstance(result, LLMResult):
            messages: Any = [(result.message, result.usage)]
        else:
            messages = ((chunk.delta.message, chunk.delta.usage) for chunk in result)
        for message, chunk_usage in messages:
            usage = chunk_usage or usage
            calls += [(c.id, c.function.name, parse_arguments(c.function.arguments)) for c in message.tool_calls]
            piece = message.content if isinstance(message.content, str) else "".join(
                getattr(part, "data", "") for part in message.content or [])
            text += piece
            # Streamed as it comes while the model is answering (a tool-calling round shows in the logs instead).
            if piece and not calls:
                yield self.create_text_message(piece)
        return text, calls, usage

    def _call_tool(self, round_log: AgentInvokeMessage, tools: dict[str, ToolEntity], call_id: str, name: str,
                   args: Any) -> Generator[AgentInvokeMessage, None, str]:
        """Run one tool through Dify and return its text for the model; a failure ends the run."""
        started = time.perf_counter()
        tool = tools.get(name)
        log = self.create_log_message(label=f"CALL {name}", data={}, parent=round_log, status=START,
                                      metadata={"started_at": started,
                                                "provider": tool.identity.provider if tool else ""})
        yield log
        if tool is None:
            yield self._fail(log, started, f"there is no tool named {name}")
            raise AgentRunError(f"Agent that remembers: the model called {name!r}, which is not one of the "
                                "node's tools; nothing stored")
        arguments = {**tool.runtime_parameters, **(args if isinstance(args, dict) else {})}
        try:
            responses = self.session.tool.invoke(provider_type=ToolProviderType(tool.provider_type),
                                                 provider=tool.identity.provider, tool_name=name,
                                                 parameters=arguments)
            result = "".join(tool_text(response) for response in responses)
        except Exception as error:  # the daemon's error for a failed tool is a plain Exception
            yield self._fail(log, started, f"tool {name} failed: {error}")
            raise AgentRunError(f"Agent that remembers: tool {name} failed, nothing stored: {error}") from None
        yield self.finish_log_message(log=log, data={"output": {"tool_call_id": call_id, "tool_call_name": name,
                                                                "tool_call_input": arguments,
                                                                "tool_response": result}},
                                      metadata={"started_at": started, "finished_at": time.perf_counter(),
                                                "provider": tool.identity.provider})
        return result

    def _fail(self, log: AgentInvokeMessage, started: float, reason: str) -> AgentInvokeMessage:
        return self.finish_log_message(log=log, status=ERROR, error=reason, data={"error": reason},
                                       metadata={"started_at": started, "finished_at": time.perf_counter()})

    @staticmethod
    def _metadata(usage: LLMUsage | None) -> dict[str, Any]:
        if usage is None:
            return {"total_tokens": 0, "prompt_tokens": 0, "completion_tokens": 0, "total_price": 0.0,
                    "currency": ""}
        return {"total_tokens": usage.total_tokens, "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens, "total_price": float(usage.total_price),
                "currency": usage.currency}


def parse_arguments(arguments: str | None) -> Any:
    """Return a tool call's arguments; text that is not JSON ends the run (a truncated model output)."""
    if not arguments:
        return {}
    try:
        return json.loads(arguments)
    except ValueError:
        raise AgentRunError(f"Agent that remembers: the model's tool-call arguments are not JSON: "
                            f"{arguments[:200]!r}") from None


def tool_text(response: ToolInvokeMessage) -> str:
    """Return what the model reads of one tool message (as Dify's own function-calling strategy does)."""
    message = response.message
    if response.type in (ToolInvokeMessage.MessageType.TEXT, ToolInvokeMessage.MessageType.LINK):
        return str(getattr(message, "text", ""))
    if response.type == ToolInvokeMessage.MessageType.JSON:
        return "tool response: " + json.dumps(getattr(message, "json_object", {}), ensure_ascii=False) + "."
    return ""


def to_prompt_message(message: Mapping[str, Any]) -> PromptMessage:
    """Return the SDK prompt message for an OpenAI-shaped message of the assembled context."""
    role, content = message["role"], message.get("content") or ""
    if role == "system":
        return SystemPromptMessage(content=content)
    if role == "user":
        return UserPromptMessage(content=content)
    if role == "tool":
        return ToolPromptMessage(content=content, tool_call_id=message.get("tool_call_id") or "",
                                 name=message.get("name") or "")
    calls = [AssistantPromptMessage.ToolCall(
        id=str(call.get("id", "")), type="function",
        function=AssistantPromptMessage.ToolCall.ToolCallFunction(
            name=str((call.get("function") or {}).get("name", "")),
            arguments=str((call.get("function") or {}).get("arguments", "{}"))))
        for call in message.get("tool_calls") or []]
    return AssistantPromptMessage(content=content, tool_calls=calls)
