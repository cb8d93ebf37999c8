"""Rule-based event extraction for memory writes: identity, preference, constraint, decision, fact, todo."""

from __future__ import annotations

import re
from dataclasses import dataclass

from acn.text.numbers import extract_key_numbers
from acn.text.pleasantries import is_pleasantry
from acn.text.sentences import split_sentences


@dataclass(frozen=True)
class Event:
    """One memorable statement: its kind, the sentence and the topic key that later changes supersede."""

    kind: str
    content: str
    key: str | None


_I = re.IGNORECASE
_IDENTITY = [
    re.compile(r"^(?:我是(?!说|不是|想|在|要|觉得)|我叫|本人是|本人叫|我的名字(?:是|叫)|我名字叫)"),
    re.compile(r"\b(?:my name is|call me)\b", _I),
    re.compile(r"^(?:I am|I'm)\s+(?:an?|the)\s+(?!bit\b|little\b|lot\b|few\b)", _I),
    re.compile(r"^(?:I am|I'm)\s+[A-Z][a-z]+(?:\s+[A-Z][a-z]+)?\s*[.!,]?$"),
]
_CHANGE_ZH = (
    r"(?:设置为|设置成|设为|设成|改为|改成|换成|换为|定为|定成|"
    r"调整为|调整到|调为|调成|调到|修改为|更新为|改用)"
)
_DECISION = [
    re.compile(rf"决定|确认|就用|采用|选定|最终(?:用|选)|{_CHANGE_ZH}"),
    re.compile(
        r"\b(?:decided|decide to|let's use|let's go with|we'll use|we will use|go with|switch(?:ed)? to|"
        r"confirmed|settled on)\b",
        _I,
    ),
    re.compile(
        r"\b(?:set|change|changed|update|updated|increase|decrease|raise|lower|reduce)\b.{1,40}?\bto\b", _I
    ),
]
_TODO_STRONG = [
    re.compile(r"待办|下一步|记得|别忘了|不要忘了|提醒我|TODO|回头(?:要|再)"),
    re.compile(r"\b(?:next step|remember to|don't forget|do not forget|remind me|to-?do)\b", _I),
]
_CONSTRAINT = [
    re.compile(
        r"必须|务必|不要|不能|只能|只(?:可以|用|接受|回复|允许|说|做|看|发|推荐|需要?)|禁止|一定要|不得|"
        r"不允许|不可以|严禁|千万别|(?<![特区分类级性识告派鉴个])别(?![人的处名])"
    ),
    re.compile(r"^(?:please\s+)?(?:don't|do not|never|always|only)\b", _I),
    re.compile(
        r"\b(?:must|mustn't|must not|cannot|can't|should never|should always|no more than|at most|"
        r"at least|never)\b",
        _I,
    ),
]
_PREFERENCE = [
    re.compile(r"喜欢|偏好|更喜欢|不想|不喜欢|希望|倾向于?|讨厌|习惯(?:用|于)|最好(?:是|用)"),
    re.compile(
        r"\b(?:prefer|I like|I love|I don't want|I do not want|I'd rather|I would rather|I hate|"
        r"I don't like|I want)\b",
        _I,
    ),
]
_TODO_WEAK = [
    re.compile(r"需要|要记|得去|待处理"),
    re.compile(r"\b(?:need to|have to|should)\b", _I),
]
_ASSISTANT_CONFIRM = re.compile(
    r"已(?:经)?(?:为您|为你|帮您|帮你)?(?:将|把)?.{0,20}?(?:设置|设为|改为|改成|修改|更新|调整|确认|预约|预订|创建|提交)|"
    r"\b(?:I've|I have|has been|have been)\s+(?:set|updated|changed|confirmed|booked|created|scheduled)\b",
    _I,
)
_QUESTION_END = re.compile(r"(?:[?？]|[吗么嘛][。.!！~～]*)\s*$")
_LEADING_CLAUSE = re.compile(r"^([^，,、]{1,20})[，,、]\s*")
_FACT_KINDS = frozenset(
    {"amount", "date", "time", "duration", "percent", "id", "account", "version", "phone", "email"}
)
# What record_turn extracts besides statements, switched by `python -m bench.recall --ablate` to measure what each
# kind of row adds (issue 47): a user's question that carries a key number kept as a fact; an assistant sentence
# that carries one (a ticket number, a promised date) kept as a fact although it confirms no change.
QUESTION_FACTS = True
ASSISTANT_FACTS = False

# Topics whose wording varies: every synonym maps to one key so a later change supersedes the earlier.
_TOPICS: list[tuple[str, re.Pattern[str]]] = [
    ("超时", re.compile(r"超时|time-?\s?outs?\b", _I)),
    ("recommendation", re.compile(r"推荐|推销|recommend(?:ation)?s?\b", _I)),
    ("重试", re.compile(r"重试|\bretr(?:y|ies)\b", _I)),
    (
        "语言",
        re.compile(
            r"语言|用中文|用英文|说中文|说英文|中文回复|英文回复|\blanguage\b|\bin (?:english|chinese)\b", _I
        ),
    ),
    ("预算", re.compile(r"预算|\bbudget\b", _I)),
    ("截止日期", re.compile(r"截止|\bdeadline\b|\bdue date\b", _I)),
    ("阈值", re.compile(r"阈值|\bthreshold\b", _I)),
    ("数据库", re.compile(r"数据库|\bdatabase\b", _I)),
    (
        "回复长度",
        re.compile(r"简洁|简短|字数|篇幅|\bconcise\b|\bbrief\b|\bshort(?:er)? (?:answers|replies)\b", _I),
    ),
    ("通知", re.compile(r"通知|短信提醒|\bnotif(?:y|ications?)\b", _I)),
    ("联系方式", re.compile(r"联系方式|手机号|电话号码|\bphone number\b|\bcontact\b", _I)),
    ("温度", re.compile(r"温度|\btemperature\b", _I)),
]
_PARAMETER_ZH = re.compile(rf"(?P<x>[^，,。；;：:\s]{{1,20}}?)\s*{_CHANGE_ZH}")
_PARAMETER_EN = re.compile(
    r"\b(?:set|change|switch|update|increase|decrease|raise|lower|reduce)\s+(?:the\s+|our\s+|my\s+|your\s+)?"
    r"(?P<x>[A-Za-z_][\w -]{0,30}?)\s+(?:to|=)\s",
    _I,
)
_ASSIGNMENT = re.compile(r"(?P<x>[A-Za-z_][\w.]{0,30})\s*(?:=|[:：](?=\s*[\d\"']))\s*\S")
_SUBJECT_ZH = re.compile(
    r"^(?P<x>[\u4e00-\u9fffA-Za-z_]{2,8}?)(?:必须|务必|不能|只能|一定要|不要|不得|不可以)"
)
_LEAD_WORDS = re.compile(
    r"^(?:那就|那么|那|就|先|再|请|麻烦|帮我|给我|我们|咱们|我|你|您|已经|已|为您|为你|帮您|帮你|将|把|要|想|"
    r"打算|现在|以后|后来|还是|然后|所以|另外|还有)+"
)
_TRAIL_WORDS = re.compile(r"(?:的?时间|的?设置|的?参数|的?配置|的?值|数值|一下|统一|全部|都)+$")
_PRONOUNS = frozenset(
    {"我", "你", "您", "我们", "他", "她", "它", "这", "那", "这个", "那个", "it", "this", "that"}
)
MAX_KEY_CHARS = 16


def extract_events(text: str, role: str = "user") -> list[Event]:
    """Return the events stated in one message, sentence by sentence.

    Rules: user sentences are classified in the order identity, decision, explicit todo, constraint,
    preference, weak todo, then fact (a sentence with a non-plain key number); pleasantries, chit-chat
    and questions are skipped (a question carrying an ID, amount or date is kept as a fact). Assistant
    sentences become decisions only when they confirm a change and carry a key number; other roles give
    nothing.

    Key rule (decisions, constraints, preferences), first hit wins:
    1. the noun phrase before a change verb (设为/改为/改成/换成…, English "set X to", or "name=value"),
       cut to the part after its last 的, then mapped through the topic table (超时时间 -> 超时) or else
       stripped of leading function words (把/将/请/我们…) and trailing 时间/设置/参数/值;
       so "超时时间设为30秒" and "超时改成45秒" both give "超时";
    2. the first topic-table synonym anywhere in the sentence ("不要给我推荐新品" -> "recommendation");
    3. the short subject before 必须/不能/只能… ; otherwise None.
    """
    if role == "user":
        classify = _classify_user
    elif role == "assistant":
        classify = _classify_assistant
    else:
        return []
    events = []
    for sentence in split_sentences(text):
        content = _strip_leading_pleasantries(sentence)
        if not content or is_pleasantry(content):
            continue
        kind = classify(content)
        if kind is not None:
            events.append(Event(kind=kind, content=content, key=topic_key(content, kind)))
    return events


def _strip_leading_pleasantries(sentence: str) -> str:
    """Return sentence without leading acknowledgement clauses ("好的，超时改成30秒" -> "超时改成30秒")."""
    content = sentence.strip()
    while (match := _LEADING_CLAUSE.match(content)) and is_pleasantry(match.group(1)):
        content = content[match.end() :].strip()
    return content


def _matches(patterns: list[re.Pattern[str]], text: str) -> bool:
    """Return True when any pattern matches text."""
    return any(pattern.search(text) for pattern in patterns)


def _has_key_numbers(text: str) -> bool:
    """Return True when text carries an amount, date, ID, account or other non-plain number."""
    return any(number.kind in _FACT_KINDS for number in extract_key_numbers(text))


def _classify_user(sentence: str) -> str | None:
    """Return the event kind of a user sentence, or None when it is not memorable."""
    if _QUESTION_END.search(sentence):
        return "fact" if QUESTION_FACTS and _has_key_numbers(sentence) else None
    rules = [
        ("identity", _IDENTITY),
        ("decision", _DECISION),
        ("todo", _TODO_STRONG),
        ("constraint", _CONSTRAINT),
        ("preference", _PREFERENCE),
        ("todo", _TODO_WEAK),
    ]
    for kind, patterns in rules:
        if _matches(patterns, sentence):
            return kind
    return "fact" if _has_key_numbers(sentence) else None


def _classify_assistant(sentence: str) -> str | None:
    """Return "decision" for an assistant confirmation that carries a key number, else None."""
    if _QUESTION_END.search(sentence):
        return None
    confirms = _ASSISTANT_CONFIRM.search(sentence) or _matches(_DECISION, sentence)
    if not _has_key_numbers(sentence):
        return None
    return "decision" if confirms else "fact" if ASSISTANT_FACTS else None


def topic_key(sentence: str, kind: str) -> str | None:
    """Return the topic key of a decision, constraint or preference (see extract_events), else None."""
    if kind not in ("decision", "constraint", "preference"):
        return None
    for pattern in (_PARAMETER_ZH, _PARAMETER_EN, _ASSIGNMENT):
        match = pattern.search(sentence)
        if match and (key := _normalise_key(match.group("x"))):
            return key
    for key, pattern in _TOPICS:
        if pattern.search(sentence):
            return key
    match = _SUBJECT_ZH.search(sentence)
    return _normalise_key(match.group("x")) if match else None


def _normalise_key(phrase: str) -> str | None:
    """Return a short stable key for a noun phrase, or None when nothing topical is left."""
    # "数据库的连接池大小" is about the pool size, not the database: only the head after 的 counts.
    phrase = phrase.strip().split("的")[-1]
    for key, pattern in _TOPICS:
        if pattern.search(phrase):
            return key
    phrase = _LEAD_WORDS.sub("", phrase)
    trimmed = _TRAIL_WORDS.sub("", phrase)
    phrase = trimmed if len(trimmed) >= 2 else phrase
    phrase = re.sub(r"^(?:the|our|my|your|a|an)\s+", "", phrase.strip(), flags=_I)
    key = re.sub(r"[\s-]+", "_", phrase.strip().lower())
    if not key or key in _PRONOUNS or len(key) > MAX_KEY_CHARS or not re.search(r"\w", key):
        return None
    return key
