"""A multi-line input (a pasted dialogue or text): what to search for besides one query over all of it.

A pasted dialogue ("Bart: 元旦晚会我要表演魔术！\\nAssistant: 真是太棒了！…\\nBart: 我特别期待那天晚上…") searched
as one query blurs both legs: BM25 counts every line's words and the speaker names on each line, the dense
vector averages the assistant's small talk in with what the person said. The memory a dialogue calls for is cued
by what the person said, often by one utterance near the end. So, for an input of several lines:

- the main query is the lines of the people talking (the assistant's lines and every "name:" prefix left out;
  an input without an assistant line keeps all its lines);
- its last few utterances (every speaker's: the assistant's latest line often names what the memory is about)
  are searched each on its own, and acn/assembly/hops.py merges the lists.

An input of one line, or two lines that are not two speakers, is none of this: one search, as before.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from acn.text.pleasantries import is_pleasantry
from acn.text.terms import content_term_set

# An input is a dialogue or a pasted text when it has at least MIN_LINES non-empty lines, or two lines each opened
# by a speaker ("user: …\nassistant: …").
MIN_LINES = 3
# Each utterance searched on its own costs one more store search (~5-8 ms with dense vectors), and only a
# multi-line input pays it. Three cover the last exchange, where the cue usually is; on the dev halves of
# MADial-Bench (bench.recall) two did about as well as three (zh 1k 82.1 vs 82.3), one worse (80.4, users' lines).
MAX_UTTERANCES = 3
# "Bart: …", "用户：…", "Dr. Smith: …", "<Bart>:"…"": a name of at most four words that starts with a letter
# (maybe in brackets), then a colon; quotes around what was said are dropped. A time ("at 10:30") or a URL
# ("https://…") is not a speaker: no digit or slash right after the colon.
_SPEAKER = re.compile(r"^\s*[<\[【(（]?([^\W\d_][\w.'\- ]{0,30}?)[>\]】)）]?\s*[:：](?![\d/])\s*(\S.*)$")
MAX_SPEAKER_WORDS = 4
_QUOTES = "\"'“”「」‘’ "
# Speakers that are the assistant's side of a pasted dialogue; every other speaker is a person talking.
_ASSISTANT = re.compile(r"(?:assistant|ai|bot|chatbot|system|gpt|chatgpt|model|agent|助手|小助手|智能助手|"
                        r"ai助手|助理|机器人|客服|系统)", re.IGNORECASE)
_ROLE = re.compile(r"(?:user|human|me|customer|用户|我|客户)", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Line:
    """One non-empty line of a multi-line input: who said it (None: no "name:" prefix) and what was said."""

    speaker: str | None
    text: str

    @property
    def assistant(self) -> bool:
        return self.speaker is not None and _ASSISTANT.fullmatch(self.speaker) is not None


def lines_of(text: str) -> list[Line]:
    """Return the lines of a multi-line input, in order; [] for an input that is neither a dialogue nor a
    pasted text (fewer than MIN_LINES non-empty lines, and not two speaker lines)."""
    raw = [line.strip() for line in text.splitlines() if line.strip()]
    lines = [Line(*speaker_and_text(line)) for line in raw]
    # A name is a speaker when it has turns (opens two lines or more) or is a role ("user", "assistant"); a label
    # used once ("Note: …", "Error: …") is part of its line.
    turns = Counter(line.speaker for line in lines)
    lines = [line if line.speaker is None or turns[line.speaker] > 1 or is_role(line.speaker) else Line(None, whole)
             for line, whole in zip(lines, raw, strict=True)]
    speakers = sum(line.speaker is not None for line in lines)
    if len(lines) < MIN_LINES and not (len(lines) == 2 and speakers == 2):
        return []
    return lines


def is_dialogue(text: str) -> bool:
    """Return True for a pasted dialogue: a multi-line input with lines opened by speakers (lines_of)."""
    return "\n" in text.strip() and any(line.speaker is not None for line in lines_of(text))


def is_role(speaker: str) -> bool:
    """Return True for a role name ("user", "assistant", "用户", "助手"), a speaker even on one line."""
    return _ROLE.fullmatch(speaker) is not None or _ASSISTANT.fullmatch(speaker) is not None


def speaker_and_text(line: str) -> tuple[str | None, str]:
    """Return (speaker, what was said) for a "name: text" line, (None, the line) otherwise."""
    match = _SPEAKER.match(line)
    if match is None or len(match.group(1).split()) > MAX_SPEAKER_WORDS or not match.group(2).strip(_QUOTES):
        return None, line.strip()
    return match.group(1).strip(), match.group(2).strip(_QUOTES)


def spoken_text(text: str) -> str:
    """Return the main query of a multi-line input: its people's lines without their speakers (every line when
    none is the assistant's, or all are); the input itself when it is not multi-line."""
    lines = lines_of(text)
    if not lines:
        return text
    people = [line for line in lines if not line.assistant] or lines
    return "\n".join(line.text for line in people)


def latest_utterances(text: str, limit: int = MAX_UTTERANCES) -> list[str]:
    """Return the last `limit` lines of a multi-line input that carry content (any speaker), latest first,
    without their speakers; [] for an input that is not multi-line."""
    picked: list[str] = []
    for line in reversed(lines_of(text)):
        if len(picked) >= limit:
            break
        if is_pleasantry(line.text) or not content_term_set(line.text) or line.text in picked:
            continue  # "好的" / "thanks" cues nothing
        picked.append(line.text)
    return picked
