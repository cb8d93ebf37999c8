"""The contexts users would build instead, on the same turns and budgets: a last-N-tokens window and BM25.

- window: LangChain `trim_messages(strategy="last")` behaviour — the newest whole messages that fit.
- bm25: `rank_bm25.BM25Okapi` over the raw turns (jieba for Chinese, words for English); the best-ranked
  turns that fit, shown in conversation order.

Both count tokens exactly as assemble does (the configured tokenizer plus the chat-format overhead per
message), and both leave room for the question as the last user message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acn.text.tokens import MESSAGE_OVERHEAD_TOKENS, Tokenizer

_WORD = re.compile(r"[a-z0-9]+")
_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class Turn:
    """One raw message of a conversation as a baseline sees it."""

    id: str
    text: str  # what the context shows, e.g. "Caroline: I went to a support group yesterday."


@dataclass(frozen=True)
class Context:
    """What a baseline puts before the model: the chosen turn ids, the text and its token cost."""

    ids: list[str]
    text: str
    tokens: int


def bm25_tokens(text: str) -> list[str]:
    """Return BM25 terms: jieba words for Chinese, lower-case words and numbers for the rest."""
    lowered = text.lower()
    if _CJK.search(lowered):
        import jieba

        return [w for w in (t.strip() for t in jieba.cut_for_search(lowered)) if w and not _punctuation(w)]
    return _WORD.findall(lowered)


def _punctuation(word: str) -> bool:
    return not any(ch.isalnum() for ch in word)


def _pack(turns: list[Turn], order: list[int], room: int, tokenizer: Tokenizer, *, stop_at_first: bool) -> list[int]:
    chosen, used = [], 0
    for index in order:
        cost = tokenizer.count(turns[index].text) + MESSAGE_OVERHEAD_TOKENS
        if used + cost > room:
            if stop_at_first:
                break
            continue
        chosen.append(index)
        used += cost
    return sorted(chosen)


def _context(turns: list[Turn], chosen: list[int], tokenizer: Tokenizer, question: str) -> Context:
    texts = [turns[i].text for i in chosen]
    tokens = sum(tokenizer.count(t) + MESSAGE_OVERHEAD_TOKENS for t in [*texts, question])
    return Context(ids=[turns[i].id for i in chosen], text="\n".join([*texts, question]), tokens=tokens)


def window_context(turns: list[Turn], question: str, budget: int, tokenizer: Tokenizer) -> Context:
    """Return the newest whole messages that fit beside the question (trim_messages, strategy "last")."""
    room = budget - tokenizer.count(question) - MESSAGE_OVERHEAD_TOKENS
    newest_first = list(range(len(turns) - 1, -1, -1))
    return _context(turns, _pack(turns, newest_first, room, tokenizer, stop_at_first=True), tokenizer, question)


class BM25Baseline:
    """BM25 over one conversation's raw turns (rank_bm25, the library users reach for)."""

    def __init__(self, turns: list[Turn]) -> None:
        from rank_bm25 import BM25Okapi

        self.turns = turns
        self._index = BM25Okapi([bm25_tokens(t.text) or ["∅"] for t in turns])

    def context(self, question: str, budget: int, tokenizer: Tokenizer) -> Context:
        """Return the best-ranked turns that fit beside the question, in conversation order."""
        scores = self._index.get_scores(bm25_tokens(question))
        ranked = sorted(range(len(self.turns)), key=lambda i: (-scores[i], i))
        room = budget - tokenizer.count(question) - MESSAGE_OVERHEAD_TOKENS
        return _context(self.turns, _pack(self.turns, ranked, room, tokenizer, stop_at_first=False), tokenizer,
                        question)
