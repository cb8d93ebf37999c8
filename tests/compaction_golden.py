"""Compaction outputs captured from the quadratic code (a29ecb3), to prove the linear rewrite changes nothing.

`digests()` runs every case through `compact_turns` and hashes the whole outcome (segments with text, tokens and
ids, the new ids, the number counts). GOLDEN holds the digests a29ecb3 produced; regenerate them only for a
deliberate change of behaviour: `.venv/bin/python -m tests.compaction_golden`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from acn.common.models import Message, Segment
from acn.compaction.engine import CompactionOutcome, compact_turns
from acn.text.tokens import load_tokenizer
from tests.compaction_conversations import EN_PROJECT_TURNS, ZH_FINANCE_TURNS, conversation
from tests.long_conversation import turn_messages


@dataclass(frozen=True)
class Case:
    messages: Callable[[], list[Message]]
    segment_size: int = 6
    max_segments: int = 5
    split: int = 0  # compact messages[:split] first, then the rest with its segments as `previous`


def _generated(count: int, seed: int = 16) -> Callable[[], list[Message]]:
    def make() -> list[Message]:
        from bench.compaction_cost import conversation as generated

        return generated(count, seed)

    return make


def _long_conversation() -> list[Message]:
    return [Message.model_validate({**m, "turn": turn}) for turn in range(1, 61) for m in turn_messages(turn)]


def _mixed() -> list[Message]:
    return conversation(ZH_FINANCE_TURNS) + conversation(EN_PROJECT_TURNS, first_turn=len(ZH_FINANCE_TURNS) + 1)


CASES: dict[str, Case] = {
    "zh_finance": Case(lambda: conversation(ZH_FINANCE_TURNS), segment_size=3, max_segments=2),
    "en_project": Case(lambda: conversation(EN_PROJECT_TURNS), segment_size=2, max_segments=2),
    "mixed": Case(_mixed),
    "mixed_small": Case(_mixed, segment_size=2, max_segments=1),
    "long_conversation": Case(_long_conversation),
    "long_conversation_4_3": Case(_long_conversation, segment_size=4, max_segments=3),
    "generated_100": Case(_generated(100)),
    "generated_300": Case(_generated(300, seed=3)),
    "generated_300_5_1": Case(_generated(300, seed=4), segment_size=5, max_segments=1),
    "generated_300_8_3": Case(_generated(300, seed=5), segment_size=8, max_segments=3),
    "generated_600": Case(_generated(600, seed=6)),
    "generated_400_in_two": Case(_generated(400, seed=7), split=200),
    "mixed_in_two": Case(_mixed, segment_size=3, max_segments=2, split=24),
}


def run_case(case: Case) -> CompactionOutcome:
    tokenizer = load_tokenizer("cl100k_base")
    messages = case.messages()
    previous: list[Segment] = []
    if case.split:
        previous = compact_turns(messages[: case.split], [], segment_size=case.segment_size,
                                 max_segments=case.max_segments, engine="extractive", chat=None,
                                 tokenizer=tokenizer).segments
        messages = messages[case.split:]
    return compact_turns(messages, previous, segment_size=case.segment_size, max_segments=case.max_segments,
                         engine="extractive", chat=None, tokenizer=tokenizer)


def digest(outcome: CompactionOutcome) -> str:
    body = {"segments": [segment.model_dump() for segment in outcome.segments], "new": outcome.new_segment_ids,
            "counts": [outcome.numbers_in_source, outcome.numbers_preserved, outcome.numbers_restored]}
    return hashlib.sha256(json.dumps(body, ensure_ascii=False, sort_keys=True).encode("utf-8")).hexdigest()


def digests() -> dict[str, str]:
    return {name: digest(run_case(case)) for name, case in CASES.items()}


GOLDEN: dict[str, str] = {
    "zh_finance": "9389b959b4e811ebfd71c416387842346d5c8e822934c977ff5a22071c85157e",
    "en_project": "f6ec3bfba382e8f416501a7dcbee1eb17d990766188baf4ee3594eab3ab8c300",
    "mixed": "c492696a93f8a5dcfdd7a7e64146bc356b552cef3b0d4d98c87d30e751f62f47",
    "mixed_small": "2cd7dae27d2e3aa55f52d6a24b998e96af0f2a015192800583894de217a5dfa7",
    "long_conversation": "e4a8425f4df5313b25044e9078b0bf8b0c9dcbf08a492cc513fccf7b17024597",
    "long_conversation_4_3": "6099efd67cd9291e50872c4588577353de7aee8d6fd3896ec4f7b0a276918836",
    "generated_100": "098436bdac2b2d16a592c9b78d64f52a9b7dc00bcc1f8734323a29f5bc42e286",
    "generated_300": "66c5f9ecde081d597532478eaaa51656f750f06d71cb1a89192b57dbd298e4ae",
    "generated_300_5_1": "15eb0c07356469e3045b35e32277c1af3cecf518da5403f0e310e3e86df3829c",
    "generated_300_8_3": "8b9c60b220b52471265128286e50594e44db12cc697300e6408a2183a54d84fb",
    "generated_600": "75346570edd23b0994b5fff0229b15635241f4a669450abcfd3df3b943d364fd",
    "generated_400_in_two": "876db7620eea1cf777a3be6a90132c9907e59c04084abc49bbf84d697ca5c6ee",
    "mixed_in_two": "2f9bfc18eff2e27f5e70c519ec27d3cfaabc0c913bba6cb7250064dd2dfa8212",
}


if __name__ == "__main__":
    print(json.dumps(digests(), indent=4))
