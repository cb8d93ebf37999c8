"""When does a query need memory? When it refers back ("as I said", "上次") or asks who the user is or what rules
hold: anything else is answered from the conversation itself, so retrieval would only add noise."""

from __future__ import annotations

import re

_BACK_REFERENCE = re.compile(
    r"之前|以前|上次|上回|刚才|刚刚|那个|前面|早先|先前|原来|说过|提过|讲过|记得|还记得|忘了|当时|"
    r"\b(earlier|before|previous(ly)?|last time|you said|i said|i told you|i mentioned|remember|again|"
    r"as discussed|that one|the one)\b",
    re.IGNORECASE,
)
_IDENTITY_OR_RULES = re.compile(
    r"我是谁|我的|我是不是|我叫什么|身份|会员|偏好|喜欢|约束|要求|规则|限制|权限|订单|账户|账号|多少|几|哪个|什么时候|截止|"
    r"\b(who am i|my|mine|preference|prefer|constraint|rule|requirement|order|account|how much|how many|"
    r"which|when|deadline)\b",
    re.IGNORECASE,
)


def needs_memory(query: str) -> bool:
    """Return True when a query refers back to earlier turns or asks about the user, rules or key facts."""
    return bool(_BACK_REFERENCE.search(query) or _IDENTITY_OR_RULES.search(query))


# An earlier conversation, not an earlier turn of this one ("那个" and "刚才" stay within the conversation).
_EARLIER_CONVERSATION = re.compile(
    r"上次|上回|上一次|之前|以前|那次|前几天|前两天|上周|上个月|上礼拜|"
    r"\b(last time|previously|before|the other day|last week|last month|earlier)\b",
    re.IGNORECASE,
)


def asks_about_earlier_conversation(query: str) -> bool:
    """Return True when a query may refer to an earlier conversation ("上次说的那个退款怎么样了？")."""
    return bool(_EARLIER_CONVERSATION.search(query))


# The business of one conversation: an order, a ticket, a parcel, a refund (a narrower list than what keeps an
# extracted memory in its conversation, acn/memory/durable.py: a day word such as "today" is in most messages of a
# chat that spans weeks, and an earlier conversation's "today" is still worth recalling).
_BUSINESS = re.compile(
    r"这单|这笔|订单|单号|工单|物流|快递|包裹|退款|退货|换货|发货|到货|"
    r"\bthis (?:order|ticket|parcel|package)\b|\border\s*(?:number|no\.?|#)|\btracking number\b|\brefund\b",
    re.IGNORECASE,
)


def conversation_business(text: str) -> bool:
    """Return True when a message is about one conversation's business (an order, a parcel, a refund …)."""
    return bool(_BUSINESS.search(text))
