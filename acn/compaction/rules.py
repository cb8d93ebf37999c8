"""Sentence rules of the extractive engine: classify a zh/en sentence as goal, constraint, decision …"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acn.text.pleasantries import is_pleasantry

GOAL, CONSTRAINT, DECISION, DONE, TODO, FACT = "goal", "constraint", "decision", "done", "todo", "fact"
# A user request made after the goal is set: a to-do unless the same turn answers it.
REQUEST = "request"

_DECISION = re.compile(
    r"(决定|确定用|确定采用|确认使用|确认用|就用|那就|就这么定|改成|改为|改到|设为|设成|设置为|设置成|换成|调整为|调整到|"
    r"调成|调到|定为|采用|选用|选定|拍板|"
    r"\bdecided?\b|\bdecision\b|\blet'?s (?:go with|use|do|switch)|\bwe'?ll (?:use|go with)|\bgo with\b|"
    r"\bswitch(?:ed)? to\b|"
    r"\b(?:set|change|changed|update|updated|increase|decrease|raise|lower) .{1,40}? to\b|"
    r"\bsettle(?:d)? on\b|\bopt(?:ed)? for\b|\binstead of\b)",
    re.IGNORECASE,
)
_CONSTRAINT = re.compile(
    r"(不要|不能|不可以|不许|不准|不得|禁止|别再|别给|千万别|务必|必须|一定要|只能|只要|只关心|只用|不超过|最多|至少|"
    r"记住|切记|所有.{0,12}都|"
    r"\bdon'?t\b|\bdo not\b|\bnever\b|\bmust\b|\bonly\b|\bno more than\b|\bat most\b|\bat least\b|\balways\b|"
    r"\bmake sure\b|\bavoid\b|\bwithout\b|\bno \w+ (?:please|at all)\b)",
    re.IGNORECASE,
)
_TASK = re.compile(
    r"(我想|我要|我希望|我需要|需要你|帮我|请你|请帮|麻烦你|麻烦帮|想请你|能不能帮|可以帮我|^请|"
    r"\bi want\b|\bi need\b|\bi'?d like\b|\bi would like\b|\bplease\b|\bhelp me\b|\bcan you\b|\bcould you\b|"
    r"\bi'?m trying to\b|\bmy goal\b)",
    re.IGNORECASE,
)
_GOAL_CHANGE = re.compile(
    r"(换个需求|换个任务|新的目标|新目标|目标改|目标换|需求改|需求变了|不做了|先不做|算了|"
    r"\bnew goal\b|\bchange of plan\b|\binstead\b|\bforget (?:about )?(?:that|it|the)\b|\bscratch that\b)",
    re.IGNORECASE,
)
_TODO = re.compile(
    r"(待办|还需要|还要|还得|之后再|稍后|回头|下一步|接下来|下周|明天|改天|后续|待定|未完成|跟进|"
    r"\btodo\b|\bto-do\b|\bstill need\b|\bnext step\b|\blater\b|\btomorrow\b|\bnext week\b|\bpending\b|"
    r"\bfollow up\b|\bremaining\b|\bnot yet\b)",
    re.IGNORECASE,
)
_DONE = re.compile(
    r"(已经|已为|已将|已把|已完成|已提交|已生成|已通知|已记录|已添加|已发送|已确认|已处理|已修复|已更新|已创建|完成了|"
    r"搞定|做好了|处理好了|提交了|生成了|修好了|"
    r"\bdone\b|\bcompleted?\b|\bfinished\b|\bi'?ve\b|\bhas been\b|\bhave been\b|\bwas (?:sent|created|"
    r"submitted|fixed|updated)\b|\balready\b|\bsuccessfully\b)",
    re.IGNORECASE,
)
_QUESTION = re.compile(
    # Leading "do"/"can" is left out: "Do not touch …" is an instruction, not a question.
    r"([？?]\s*$|吗[。？?]?$|呢[。？?]?$|^(?:what|how|which|when|where|why|who)\b)",
    re.IGNORECASE,
)
_REASON = re.compile(
    r"[，,;；\s]*(?:因为|由于|理由是|原因是|\bbecause\b|\bsince\b|\bso that\b)[，,:：\s]*", re.IGNORECASE
)
_CONSEQUENCE = re.compile(r"[，,]\s*(?:所以|因此|那就|\bso\b|\btherefore\b)?\s*", re.IGNORECASE)
_LEADING_ACK = re.compile(r"^(?P<head>[^，,。；;！!]{1,12})[，,！!]\s*(?P<rest>.+)$", re.DOTALL)
_CJK = re.compile(r"[\u4e00-\u9fff]")
_WORD = re.compile(r"[A-Za-z]+")
_TRAILING_PUNCTUATION = re.compile(r"[。．.!！;；，,\s]+$")


@dataclass
class Statement:
    """One classified sentence with where it came from."""

    kind: str
    text: str
    role: str
    turn: int
    order: int
    reason: str | None = None


def clean_sentence(sentence: str) -> str:
    """Return the sentence without a leading acknowledgement ("好的，…") and trailing punctuation."""
    text = sentence.strip()
    match = _LEADING_ACK.match(text)
    while match and is_pleasantry(match.group("head")):
        text = match.group("rest").strip()
        match = _LEADING_ACK.match(text)
    return _TRAILING_PUNCTUATION.sub("", text)


def split_reason(text: str) -> tuple[str, str | None]:
    """Split "X，因为Y" / "X because Y" (or "因为Y，所以X") into (X, Y); Y is None without a reason."""
    match = _REASON.search(text)
    if match is None:
        return text, None
    if match.start() > 0:
        reason = _TRAILING_PUNCTUATION.sub("", text[match.end() :]).strip()
        return text[: match.start()].strip(), reason or None
    parts = _CONSEQUENCE.split(text[match.end() :], maxsplit=1)
    if len(parts) == 2 and parts[0].strip() and parts[1].strip():
        return parts[1].strip(), parts[0].strip()
    return text, None


def changes_goal(text: str) -> bool:
    """Return True when a sentence announces a new task in place of the old one."""
    return _GOAL_CHANGE.search(text) is not None


def is_question(text: str) -> bool:
    """Return True when the sentence asks something rather than states it."""
    return _QUESTION.search(text.strip()) is not None


def classify(text: str, role: str, *, goal_open: bool, has_numbers: bool) -> str | None:
    """Return the kind of a cleaned sentence, or None when it is not worth keeping.

    Only the user sets constraints and the goal; an assistant's sentence is kept when it reports
    progress, plans, a decision, or carries a key number.
    """
    is_task = role == "user" and _TASK.search(text) is not None
    if is_task and goal_open and not is_question(text) and not _CONSTRAINT.search(text):
        return GOAL
    if _DECISION.search(text) and not is_question(text):
        return DECISION
    if role == "user" and _CONSTRAINT.search(text):
        return CONSTRAINT
    if _DONE.search(text):
        return DONE
    if _TODO.search(text):
        return TODO
    if is_task:
        return REQUEST
    if has_numbers or (role == "user" and not is_question(text) and _substantial(text)):
        return FACT
    return None


def _substantial(text: str) -> bool:
    """Return True for a statement long enough to carry a fact (6+ CJK characters or 4+ words)."""
    return len(_CJK.findall(text)) >= 6 or len(_WORD.findall(text)) >= 4
