"""What an input really asks: the questions after its last self-correction, chit-chat left out (issue 28).

People ramble: "今天好热。我想问问表哥生日是哪天？说错了，其实我想问表姐现在做什么工作？另外，我的相机放哪了？"
asks two things, neither of them the birthday. Retrieving for the whole input spends the budget on the weather
and the abandoned question. The rules here are general and textual (zh and en):

- the focus is what follows the last self-correction marker ("说错了", "不是这个，我要问的是", "wait, what I mean
  is", "scratch that"); the preamble before it is dropped from the retrieval query;
- the focus is split into its questions (each ends with a question mark, or opens with "另外" / "also"); each is
  retrieved for on its own, so a short second question is not drowned by a long first one;
- statements before the first question that share no content term with it (the weather, a coffee) are dropped,
  unless the question points back at them ("他", "she", "that"): then they are its subject and stay.

An input with one question and nothing to drop comes back as itself: retrieval is unchanged for it. A pasted
dialogue (lines opened by speakers, acn/retrieval/dialogue.py) is left whole: its lines are context, not chit-chat.
A message typed over several lines ("今天好热\n我想问问表哥生日是哪天\n说错了，其实我想问…", Shift+Enter in a
chat box) is read as one, each line a sentence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from acn.retrieval.dialogue import is_dialogue
from acn.text.terms import content_term_set

# A self-correction or a "what I really want to ask" marker: what follows replaces what came before.
_CORRECTION = re.compile(
    r"(?:说错了|搞错了|搞混了|问错了|打错了|不是这个|不对不对|哦不对|不对，|算了不问这个了?|算了不说这个了?|"
    r"重新问|我真正想问的是|我其实想问|其实我想问|我是想问|我要问的是|我想问的是|我想知道的是|应该是问|"
    r"\bwait,? (?:what )?i (?:mean|meant)\b|\bscratch that\b|\bforget that\b|\bnever ?mind\b|\bno,? not that\b|"
    r"\bwrong thing\b|\bi mixed it up\b|"
    r"\bwhat i (?:actually |really )?(?:want|wanted|meant|mean) (?:to (?:ask|know)|is)\b|"
    r"\bmy (?:real|actual) question is\b|\bi meant to ask\b|\bthe (?:real )?question is\b|\blet me rephrase\b)",
    re.IGNORECASE)
# Words that run on from a marker into its question ("…，其实我想问" + "的是", "what I mean is" + ":").
_MARKER_TAIL = re.compile(r"^[\s,，:：、.。!！]*(?:(?:其实|应该是|应该|想问|的是|is|"
                          r"i (?:wanted|want|meant) to (?:ask|know)|to ask)[\s,，:：]*)*", re.IGNORECASE)
# A second question in the same input: "另外，…", "还有，…", "also, …", "and another thing: …".
_SECOND = re.compile(r"(?:^|(?<=[。！？!?；;\n])|(?<=[。！？!?.;]\s))"
                     r"(?:另外|还有|顺便问下|顺便问一下|对了|再问一下|"
                     r"also|and another thing|oh,? and|plus|one more thing)"
                     r"[\s,，:：]*", re.IGNORECASE)
# Sentence ends (a line end too); an English full stop ends a sentence only before a space (not "3.5", "e.g").
_SENTENCE = re.compile(r"(?<=[。！？!?；;\n])|(?<=[a-z)\]\"'][.])(?=\s)")
_ASKS = re.compile(r"[?？]\s*$|[吗呢么][。!！]?\s*$|^\s*(?:what|where|when|who|which|how|why|is|are|do|does|did|can)\b",
                   re.IGNORECASE)
# A question that points back at what was said before it needs that statement as its subject.
_BACK_REFERENCE = re.compile(r"[他她它]们?|这个|那个|这件|那件|\b(?:he|she|it|they|him|her|them|that|this|those)\b",
                             re.IGNORECASE)
MAX_QUESTIONS = 3  # each one costs a retrieval; inputs with more ask for a summary, not for facts
MAX_FOCUS_CHARS = 600  # longer inputs are texts (an article, a transcript), not a rambling question


@dataclass(frozen=True, slots=True)
class Focus:
    """The questions to retrieve for (in order) and what was dropped before them."""

    questions: tuple[str, ...]
    dropped: str = ""

    @property
    def changed(self) -> bool:
        return bool(self.dropped) or len(self.questions) > 1


def focus(text: str) -> Focus:
    """Return the questions an input asks after its last self-correction, chit-chat before them dropped."""
    stripped = text.strip()
    if not stripped or len(stripped) > MAX_FOCUS_CHARS or is_dialogue(stripped):
        return Focus((text,))
    stripped = "\n".join(line.strip() for line in stripped.splitlines() if line.strip())
    head, tail = after_correction(stripped)
    sentences = split_sentences(tail)
    questions = split_questions(sentences)
    if not questions:
        return Focus((text,)) if not head else Focus((tail,), head)
    # Statements before the first question: kept as its context only when it points back at them.
    lead = [s for s in sentences if s not in questions and sentences.index(s) < sentences.index(questions[0])]
    first = questions[0]
    kept = [s for s in lead if _BACK_REFERENCE.search(first) or content_term_set(s) & content_term_set(first)]
    dropped = " ".join([head] * bool(head) + [s for s in lead if s not in kept])
    asked = [" ".join([*kept, first]), *questions[1:MAX_QUESTIONS]]
    # What follows the last question (a thanks, "急用") stays with it: it is cheap and may carry terms.
    rest = sentences[sentences.index(questions[-1]) + 1:]
    if rest and len(questions) <= MAX_QUESTIONS:
        asked[-1] = " ".join([asked[-1], *rest])
    if not dropped and len(asked) == 1:
        return Focus((text,))
    return Focus(tuple(q.strip() for q in asked if q.strip()), dropped.strip())


def after_correction(text: str) -> tuple[str, str]:
    """Return (what came before the last self-correction marker, what follows it); ("", text) without one."""
    last = None
    for match in _CORRECTION.finditer(text):
        last = match
    if last is None:
        return "", text
    tail = _MARKER_TAIL.sub("", text[last.end():], count=1).strip()
    if not content_term_set(tail):  # "说错了" at the very end: nothing replaces what came before
        return "", text
    return text[:last.start()].strip(), tail


def split_sentences(text: str) -> list[str]:
    """Return the sentences of a text, a second-question opener ("另外", "also") starting a new one."""
    marked = _SECOND.sub(lambda m: "\x00" + m.group(0), text)
    parts = [p.strip() for chunk in marked.split("\x00") for p in _SENTENCE.split(chunk)]
    return [p for p in parts if p and content_term_set(p) | {c for c in p if c in "?？"}]


def split_questions(sentences: list[str]) -> list[str]:
    """Return the sentences that ask something (a question mark, 吗/呢 at the end, an English question word first,
    or opened by a second-question marker)."""
    return [s for s in sentences if _ASKS.search(s) or _SECOND.match(s)]
