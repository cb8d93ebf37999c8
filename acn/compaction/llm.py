"""The LLM engine: ask an OpenAI-compatible model for the segment as strict JSON, and validate it."""

from __future__ import annotations

from typing import Annotated, Any, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from acn.common.conversation import Turn
from acn.common.errors import ProviderError
from acn.common.models import Decision, Segment
from acn.compaction.state import WorkingState

SYSTEM_PROMPT = {
    "zh": "你是一个对话压缩器。只输出一个 JSON 对象，不要输出任何其他文字。",
    "en": "You are a conversation compactor. Output one JSON object and nothing else.",
}
RULES_ZH = """请将下面第{first}-{last}轮对话压缩为结构化摘要，严格遵循以下规则。
必须保留：
1. 用户明确提出的目标、约束、偏好；
2. 已确认的技术选型、参数、配置（参数被修改时只写最新值）；
3. 未解决的问题和待办事项；
4. 关键决策及其理由；
5. 必须保留所有数字、日期、账号、金额、ID，按原文逐字写出，不要改写格式（“12万”不要写成“120000”），\
并全部放进 key_numbers。
必须丢弃：
1. 寒暄、确认性回复（好的、明白了、谢谢）；
2. 重复表述的内容；
3. 工具调用的原始返回（只保留结论）；
4. 已被推翻的方案。
当前工作状态（除非用户在对话中明确修改，否则原样保留在 goal 和 constraints 中）：
目标：{goal}
约束：{constraints}
只输出如下 JSON：
{{"goal": "一句话目标", "constraints": ["约束"], "done": ["已完成（含关键参数）"], "todo": ["待办"], \
"decisions": [{{"decision": "决策", "reason": "理由，没有则为 null"}}], "facts": ["事实"], \
"key_numbers": {{"标签": "原文中的值"}}}}
对话内容：
{conversation}"""
RULES_EN = """Compact turns {first}-{last} of the conversation below into a structured summary. \
Follow these rules strictly.
Keep:
1. goals, constraints and preferences the user stated;
2. confirmed choices, parameters and settings (when a parameter changed, only its latest value);
3. open questions and to-dos;
4. key decisions with their reasons;
5. every number, date, account, amount and ID, written exactly as in the conversation (never reformat \
"$45,000" as "45000"), and all of them in key_numbers.
Drop:
1. greetings and acknowledgements (ok, got it, thanks);
2. repetitions;
3. raw tool output (keep only the conclusion);
4. options that were rejected.
Current working state (keep it as is in goal and constraints unless the user explicitly changes it):
Goal: {goal}
Constraints: {constraints}
Output only this JSON:
{{"goal": "one-sentence goal", "constraints": ["..."], "done": ["... with key parameters"], "todo": ["..."], \
"decisions": [{{"decision": "...", "reason": "... or null"}}], "facts": ["..."], \
"key_numbers": {{"label": "value as written"}}}}
Conversation:
{conversation}"""
ROLE_NAMES = {
    "zh": {"user": "用户", "assistant": "助手", "tool": "工具"},
    "en": {"user": "User", "assistant": "Assistant", "tool": "Tool"},
}


def _text_items(value: Any) -> Any:
    """Drop empty entries; an LLM that returns one string for a list gets a one-item list, and a number in it
    ("facts": [12345]) is a fact as written: kept as text and verified like any other. Anything else (an object,
    null) is left for the schema to refuse."""
    if isinstance(value, str):
        value = [value]
    if isinstance(value, list):
        items = [str(item) if isinstance(item, int | float) and not isinstance(item, bool) else item
                 for item in value]
        return [item.strip() if isinstance(item, str) else item for item in items
                if not (isinstance(item, str) and not item.strip())]
    return value


def _decision_items(value: Any) -> Any:
    """Accept plain strings as decisions without a reason, and ignore extra keys of decision objects."""
    if not isinstance(value, list):
        return value
    items: list[Any] = []
    for item in value:
        if isinstance(item, str):
            item = {"decision": item}
        elif isinstance(item, dict):
            item = {key: item[key] for key in ("decision", "reason") if key in item}
        items.append(item)
    return items


def _number_map(value: Any) -> Any:
    """Keep key numbers as strings; an LLM may send 120000 as a JSON number."""
    if isinstance(value, dict):
        return {
            str(k): str(v) for k, v in value.items() if isinstance(v, str | int | float) and str(v).strip()
        }
    return value


TextList = Annotated[list[str], BeforeValidator(_text_items)]


class LlmSummary(BaseModel):
    """The JSON shape the model must reply with."""

    model_config = ConfigDict(extra="ignore")

    goal: str
    constraints: TextList = []
    done: TextList = []
    todo: TextList = []
    decisions: Annotated[list[Decision], BeforeValidator(_decision_items)] = []
    facts: TextList = []
    key_numbers: Annotated[dict[str, str], BeforeValidator(_number_map)]


def build_prompt(turns: list[Turn], state: WorkingState, language: str) -> tuple[str, str]:
    """Return the (system, user) prompt asking for the segment of turns as JSON."""
    lang = "zh" if language == "zh" else "en"
    none = "（无）" if lang == "zh" else "(none)"
    template = RULES_ZH if lang == "zh" else RULES_EN
    user = template.format(
        first=turns[0].number if turns else 0,
        last=turns[-1].number if turns else 0,
        goal=state.goal or none,
        constraints=("；" if lang == "zh" else "; ").join(state.constraints) or none,
        conversation=format_conversation(turns, lang),
    )
    return SYSTEM_PROMPT[lang], user


def format_conversation(turns: list[Turn], language: str) -> str:
    """Return the turns as lines "第3轮 用户: …" / "Turn 3 User: …"."""
    names = ROLE_NAMES[language]
    lines = []
    for turn in turns:
        prefix = f"第{turn.number}轮" if language == "zh" else f"Turn {turn.number}"
        for message in turn.messages:
            role = names.get(message.role, message.role)
            if message.role == "tool" and message.name:
                role = f"{role}({message.name})"
            lines.append(f"{prefix} {role}: {message.content}")
    return "\n".join(lines)


def parse_summary(reply: dict[str, Any]) -> LlmSummary:
    """Validate the model's reply; a reply that does not fit the schema is a provider error."""
    try:
        return LlmSummary.model_validate(reply)
    except PydanticValidationError as error:
        # Top-level field names only: a deeper location could carry a key the LLM chose.
        fields = sorted({str(item["loc"][0]) for item in error.errors(include_input=False, include_url=False)
                         if item["loc"] and str(item["loc"][0]) in LlmSummary.model_fields} or {"(root)"})
        raise ProviderError(f"LLM reply does not match the summary schema ({', '.join(fields)})") from None


class JsonChat(Protocol):
    """What the LLM engine asks of a model: one system+user exchange answered with a JSON object (ChatClient for
    an endpoint, ReplayChat for the caller's own model)."""

    def complete_json(self, system: str, user: str) -> dict[str, Any]: ...


def summarize_llm(turns: list[Turn], state: WorkingState, language: str, chat: JsonChat) -> Segment:
    """Return the segment (without id, text and tokens) the model writes for turns.

    Raises:
        ProviderTimeoutError: the model did not answer in time.
        ProviderError: the call failed or the reply is not a valid summary.
    """
    system, user = build_prompt(turns, state, language)
    summary = parse_summary(chat.complete_json(system, user))
    return Segment(
        id="",
        turn_range=[turns[0].number, turns[-1].number] if turns else [0, 0],
        **summary.model_dump(),
    )
