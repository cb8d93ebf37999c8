"""Where a long text may be cut so that work on its parts adds up to work on the whole (issue 47).

A working-state segment or a layer's lines change a little every turn; counting their tokens and folding them whole
was ~3 ms a turn at turn 300 of a number-rich chat. Cut into parts, each part's result is remembered and only the
changed parts are worked out again. The cuts are just before a newline, ';', '；', ',', '，' or '|' that a letter or
digit precedes (ASCII or a CJK ideograph: letters and digits every Unicode version agrees on), and just after a run
of newlines that one of a few closing punctuation marks precedes ('。', '！', '？', '.', '!', '?', '）', ')', ']', '】',
'」', '”') and a character other than a newline follows:
- tiktoken splits a text with its pattern and BPE-encodes each piece alone; under cl100k_base's pattern a letter
  run, a digit run and a contraction each end at the first character that is not one, and a run of punctuation
  ends with the newlines after it, so no piece crosses such a cut (acn/text/tokens.py; tests/test_token_parts.py);
- folding (NFKC, case folding, punctuation dropped) composes nothing across it: the separator is a starter and maps
  to itself or its half-width form, and nothing composes with a newline (acn/text/similarity.py;
  tests/test_similarity_parts.py).
"""

from __future__ import annotations

import re

# Shorter texts are worked on whole; longer ones too (a tool's JSON, cut at every comma, would fill the caches with
# one request's parts and push out every session's lines).
PARTS_MIN_CHARS = 400
PARTS_MAX_CHARS = 20_000
# Also just after a run of newlines that closing punctuation precedes (a line ending in '。' or ')'): under
# cl100k_base's pattern the punctuation run takes the newlines with it (` ?[^\s\p{L}\p{N}]++[\r\n]*+`) and ends
# there, and folding composes nothing after a newline. Without this cut a context's lines that end in '。' (an
# answer, a memory of one) were counted and folded joined to the next line's head, a part no other call shares: with
# 32 chats at once ~1 ms a turn of tokenizing at turn 1,000 (py-spy, issue 47).
_BOUNDARY = re.compile(r"(?<=[0-9A-Za-z\u4e00-\u9fff])(?=[\n;；,，|])|(?<=[。！？.!?）)\]】」”])[\r\n]+(?=[^\r\n])")


def in_parts(text: str) -> bool:
    """Whether text is long enough, and not too long, to be worked on a part at a time."""
    return PARTS_MIN_CHARS <= len(text) <= PARTS_MAX_CHARS


def text_parts(text: str) -> list[str]:
    """Return text cut at every boundary (see the module's docstring); the parts joined are text."""
    cuts = [0, *(boundary.end() for boundary in _BOUNDARY.finditer(text)), len(text)]
    return [text[start:end] for start, end in zip(cuts, cuts[1:], strict=False)]
