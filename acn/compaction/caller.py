"""LLM compaction answered by the caller's own model (engine "caller").

The server cannot call the caller's model (a Dify plugin's model is reachable only from inside the plugin, through
Dify's backwards invocation), and must never hold the caller's credential. So the caller answers: the server runs
the compaction with a ReplayChat seeded with the replies the caller has sent so far, each bound to the hash of
the prompt it answers. When the run needs a reply it does not have, it stops, stores nothing, and the response
carries that prompt (status needs_llm); the caller asks its model and posts again with one more reply. The prompts
are a pure function of the session state and the earlier replies, so the caller pins the state with
expected_version (a moved session is a 409, never a compaction mixing two states).

Replies are untrusted data: bounded in count (MAX_CALLER_ROUNDS) and size (MAX_REPLY_CHARS), parsed with the
LLM client's caps (parse_reply_content), and a reply for another prompt or a malformed one is a ProviderError:
the engine falls back to the extractive summary and says why (fallback_reason), as with a failing endpoint.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pydantic import Field

from acn.common.errors import ProviderError
from acn.common.models import StrictModel
from acn.providers.openai_chat import parse_reply_content

# One reply per segment a compaction writes: a compaction in this mode covers at most this many segments (the
# older turns wait for the next one), so an exchange ends within MAX_CALLER_ROUNDS + 1 requests.
MAX_CALLER_ROUNDS = 8
# A summary is a few hundred tokens; this leaves room for a verbose model and bounds what one request carries.
MAX_REPLY_CHARS = 100_000
PROMPT_ID = r"^[0-9a-f]{64}$"


class CallerReply(StrictModel):
    """The caller's model's answer to one compaction prompt."""

    id: str = Field(pattern=PROMPT_ID, description="The `id` of the prompt this answers (from a needs_llm answer).")
    content: str = Field(max_length=MAX_REPLY_CHARS,
                         description="The model's reply text as it came (a JSON object, a ```json fence allowed).")


class LlmPrompt(StrictModel):
    """A compaction prompt for the caller to put to its own model (system + user, non-streaming, temperature 0)."""

    id: str = Field(description="Echo it as the reply's `id`: the hex SHA-256 of the UTF-8 JSON array [system, "
                                "user] (non-ASCII characters unescaped).")
    system: str
    user: str
    round: int = Field(description="This prompt's position in the exchange: the reply goes at index round - 1.")
    max_rounds: int = Field(description="The most replies one compaction asks for.")


def prompt_id(system: str, user: str) -> str:
    """Return the hash a reply must carry to answer this prompt."""
    return hashlib.sha256(json.dumps([system, user], ensure_ascii=False).encode("utf-8")).hexdigest()


class NeedsLlm(Exception):
    """Internal control flow: the run needs the caller's answer to this prompt (nothing is stored)."""

    def __init__(self, prompt: LlmPrompt) -> None:
        super().__init__(f"needs the caller's reply to prompt {prompt.round}")
        self.prompt = prompt


class ReplayChat:
    """A chat client answering the engine's prompts, in order, from the caller's replies."""

    def __init__(self, replies: list[CallerReply]) -> None:
        self._replies = list(replies)
        self._asked = 0

    def complete_json(self, system: str, user: str) -> dict[str, Any]:
        """Return the caller's reply to this prompt parsed as a JSON object.

        Raises:
            NeedsLlm: no reply for this prompt yet.
            ProviderError: the reply answers another prompt, is malformed, or the rounds are exhausted.
        """
        index, self._asked = self._asked, self._asked + 1
        expected = prompt_id(system, user)
        if index >= len(self._replies):
            if index >= MAX_CALLER_ROUNDS:
                raise ProviderError(f"the caller's model was asked more than {MAX_CALLER_ROUNDS} times")
            raise NeedsLlm(LlmPrompt(id=expected, system=system, user=user, round=index + 1,
                                     max_rounds=MAX_CALLER_ROUNDS))
        reply = self._replies[index]
        if reply.id != expected:
            raise ProviderError(f"the caller's reply {index + 1} answers another prompt (id mismatch)")
        return parse_reply_content(reply.content)

    def close(self) -> None:
        """Nothing to close (the interface of ChatClient)."""
