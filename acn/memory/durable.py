"""What a user states about themselves outlives the conversation: the durable rule for extracted memories.

With a `user_id`, an extracted memory is the user's (scope `user`: every later conversation of the same agent
with the same user reads it) when it says who the user is or what holds for them wherever they ask; what belongs
to one conversation stays there (scope `session`). The rule, in order:

1. Only the user's own words: an assistant's confirmation stays in its conversation.
2. A sentence tied to this conversation stays in it: this order, ticket, parcel or refund, today, this time
   (这次 / 这单 / 订单 / 单号 / 物流 / 今天 / this order / today …).
3. Identity (我是… / 我叫… / my name is …) and preferences (喜欢 / 不想 / prefer …) are the user's.
4. A constraint is the user's when it is about them: it says 我 / my / I, names a profile field, or says it
   always holds (以后 / 每次 / always / never …); "代码必须用Python写" stays in the conversation.
5. A decision or a fact is the user's only when it states a profile field of theirs (phone, address, name,
   e-mail, invoice title, birthday, ID number, allergy …) in the first person ("我的收货电话改成 139…").
   Such a statement becomes an `identity` memory keyed by its field (`phone`, `address` …), so the next value
   of that field supersedes it in whichever conversation it is said, the old one kept as a version; a sentence
   naming two fields is cut into one memory per field. Allergies add up and are never keyed.
6. Todos and everything else stay in the conversation.

`ACN_USER_MEMORY` (and `user_memory` on record_turn and memory_write) chooses: `profile` (the rule above, the
default), `all` (every extracted memory is the user's), `off` (every one stays in its conversation, as before
the rule). Without a `user_id` nothing changes: every extracted memory is the session's.
"""

from __future__ import annotations

import re
from typing import Literal

from acn.common.models import MemoryKind, Message
from acn.memory.items import MAX_CONTENT_CHARS, MemoryItem
from acn.memory.write import extracted_items
from acn.text.sentences import split_sentences

UserMemory = Literal["profile", "all", "off"]
USER_MEMORY_CHOICES: tuple[UserMemory, ...] = ("profile", "all", "off")

_I = re.IGNORECASE
# Words that tie a sentence to this conversation's business (an order, a ticket, a date).
_THIS_CONVERSATION = re.compile(
    r"这次|本次|这一次|这单|这笔|这个订单|该订单|订单|单号|工单|物流|快递|包裹|退款|退货|换货|发货|到货|"
    r"今天|明天|后天|昨天|今晚|刚才|这周|本周|"
    r"\bthis (?:order|ticket|time|call|parcel|package)\b|\border\s*(?:number|no\.?|#)|\btracking\b|"
    r"\brefund\b|\btoday\b|\btomorrow\b|\byesterday\b|\btonight\b",
    _I,
)
_FIRST_PERSON = re.compile(r"我|本人|\b(?:I|my|me|mine|myself)\b", _I)
# Fields that are the customer's even when the sentence does not say 我 ("发票抬头改成…", "收货地址是…").
_PERSONAL = re.compile(r"收货|收件|发票|开票|\b(?:shipping|billing|delivery address)\b", _I)
_QUESTION = re.compile(r"[?？]\s*$|[吗么嘛呢][。.!！~～]*\s*$|多少|什么|哪(?:里|儿|个)|几号")
_ALWAYS = re.compile(r"以后|今后|每次|一直|永远|始终|从不|向来|\b(?:always|never|from now on|every time)\b", _I)
# Single-valued profile fields: a later value supersedes the earlier one (the key), wherever it is said.
PROFILE_FIELDS: list[tuple[str, re.Pattern[str]]] = [
    ("invoice_title", re.compile(r"发票抬头|抬头|\binvoice (?:title|header|name)\b", _I)),
    ("phone", re.compile(r"电话|手机|联系方式|\b(?:phone|mobile|cell)(?: number)?\b", _I)),
    ("email", re.compile(r"邮箱|电子邮件|\be-?mail\b", _I)),
    ("address", re.compile(r"地址|住在|住址|\baddress\b|\bI live (?:in|at)\b", _I)),
    ("birthday", re.compile(r"生日|出生日期|\bbirthday\b|\bdate of birth\b", _I)),
    ("id_number", re.compile(r"身份证|证件号|\bID (?:number|card)\b|\bpassport\b", _I)),
    ("name", re.compile(r"我叫|名字|姓名|\bmy name is\b|\bcall me\b", _I)),
]
# Additive facts about the user (a second allergy does not replace the first): the user's, never keyed.
_ADDITIVE = re.compile(r"过敏|忌口|不能吃|不吃|吃素|素食|\ballergic\b|\ballerg(?:y|ies)\b|\bvegetarian\b|\bvegan\b", _I)
_CLAUSE = re.compile(r"(?<=[，,；;])\s*")


def extracted_for(messages: list[Message], user_id: str | None, mode: UserMemory) -> list[MemoryItem]:
    """Return the memory items extracted from the messages, the user's ones at scope `user` (the module's rule).

    Without a user_id, or with mode `off`, exactly what extraction gives (every item at scope `session`)."""
    if not user_id or mode == "off":
        return extracted_items(messages)
    items: list[MemoryItem] = []
    for message in messages:
        found = extracted_items([message])
        if mode == "profile" and message.role == "user":
            found += unextracted_profile(message, found)
        for item in found:
            if mode == "all" or (message.role == "user" and is_durable(item)):
                items += as_durable(item) if mode == "profile" else [item.model_copy(update={"scope": "user"})]
            else:
                items.append(item)
    return items


def unextracted_profile(message: Message, found: list[MemoryItem]) -> list[MemoryItem]:
    """Return the first-person profile statements of a user message that event extraction left out ("我住在…",
    "我对芒果也过敏"): a profile field as identity, an allergy or a diet as a constraint."""
    said = [item.content for item in found]
    items = []
    for sentence in split_sentences(message.content):
        if any(sentence in text or text in sentence for text in said) or _QUESTION.search(sentence):
            continue
        if not _FIRST_PERSON.search(sentence) or _THIS_CONVERSATION.search(sentence):
            continue
        kind: MemoryKind | None = ("constraint" if _ADDITIVE.search(sentence)
                                   else "identity" if profile_fields(sentence) else None)
        if kind is not None:
            items.append(MemoryItem(kind=kind, content=sentence[:MAX_CONTENT_CHARS], meta=message.meta,
                                    turn=message.turn))
    return items


def is_durable(item: MemoryItem) -> bool:
    """Return True when a user's extracted statement belongs to the user rather than to this conversation."""
    text = item.content
    if _THIS_CONVERSATION.search(text):
        return False
    if item.kind in ("identity", "preference"):
        return True
    about_them = bool(_FIRST_PERSON.search(text))
    additive = bool(_ADDITIVE.search(text))
    if item.kind == "constraint":
        return about_them or additive or bool(profile_fields(text)) or bool(_ALWAYS.search(text))
    if item.kind in ("decision", "fact"):
        return (about_them or bool(_PERSONAL.search(text))) and (additive or bool(profile_fields(text)))
    return False


def profile_fields(text: str) -> list[str]:
    """Return the single-valued profile fields a sentence names, in the table's order."""
    return [field for field, pattern in PROFILE_FIELDS if pattern.search(text)]


def as_durable(item: MemoryItem) -> list[MemoryItem]:
    """Return the item at the user's scope; a profile statement as identity memories keyed by field."""
    user = item.model_copy(update={"scope": "user"})
    if _ADDITIVE.search(item.content) or item.kind not in ("identity", "decision", "fact"):
        return [user]
    fields = profile_fields(item.content)
    if not fields:
        return [user]
    if len(fields) == 1:
        return [user.model_copy(update={"kind": "identity", "key": fields[0]})]
    # Two fields in one sentence: one memory per field, so that a new phone does not close the address.
    clauses = [c.strip("，,；; ") for c in _CLAUSE.split(item.content) if c.strip("，,；; ")]
    keyed: dict[str, str] = {}
    for clause in clauses:
        named = profile_fields(clause)
        if len(named) == 1 and named[0] not in keyed:
            keyed[named[0]] = clause
    if len(keyed) < 2:
        return [user.model_copy(update={"kind": "identity"})]
    return [user.model_copy(update={"kind": "identity", "key": field, "content": clause})
            for field, clause in keyed.items()]
