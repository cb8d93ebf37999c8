"""Query helpers for retrieval: who a question is about, and back-references that need the previous turn."""

from __future__ import annotations

import re
from collections.abc import Iterable

from acn.text.similarity import normalise

# "What did I say …" asks for the user's own words, "what did you say …" for the assistant's.
_FIRST_PERSON = re.compile(r"我(?:之前|以前|上次|刚才|刚刚)?(?:说|提|讲|问|告诉)|"
                           r"\b(?:i said|i told you|i mentioned|i asked|did i (?:say|tell|mention|ask))\b",
                           re.IGNORECASE)
_SECOND_PERSON = re.compile(r"你(?:之前|以前|上次|刚才|刚刚)?(?:说|提|讲|答应|告诉)|"
                            r"\b(?:you said|you told me|you mentioned|did you (?:say|tell|mention|promise))\b",
                            re.IGNORECASE)
_BACK_REFERENCE = re.compile(r"那个|这个|那件|这件|那笔|这笔|那单|它|\b(?:that one|this one|it|that|those)\b",
                             re.IGNORECASE)
_FILLER = re.compile(r"那个|这个|那件|这件|那笔|这笔|那单|之前|刚才|刚刚|上次|是|的|了|吗|呢|啊|什么|多少|哪个|怎么|"
                     r"\b(?:that|this|one|it|is|was|what|which|the|a|an|about|again|earlier|before)\b",
                     re.IGNORECASE)
MIN_CONTENT_CHARS = 3


def speaker_names(query: str, names: Iterable[str]) -> set[str]:
    """Return the speakers a query is about: names it mentions as words, or "user"/"assistant" by person."""
    folded = query.casefold()
    found = {name for name in names if name and _mentions(folded, name.casefold())}
    if _FIRST_PERSON.search(query):
        found.add("user")
    if _SECOND_PERSON.search(query):
        found.add("assistant")
    return found


def _mentions(folded_query: str, folded_name: str) -> bool:
    if not folded_name.isascii():
        return folded_name in folded_query
    return re.search(rf"(?<![a-z0-9]){re.escape(folded_name)}(?![a-z0-9])", folded_query) is not None


def resolve_back_reference(query: str, previous_user_turn: str | None) -> str:
    """Return the query, with the previous user message appended when it is only a back-reference.

    "那个是多少？" or "what about that one?" carries nothing to search for on its own: what "that" means
    is in the turn before. A query with content of its own is left alone.
    """
    if not previous_user_turn or not _BACK_REFERENCE.search(query):
        return query
    content = normalise(_FILLER.sub(" ", query))
    if len(content) >= MIN_CONTENT_CHARS:
        return query
    return f"{query} {previous_user_turn}"
