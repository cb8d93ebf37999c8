"""edit_context's dedupe is near-linear (prefix filtering) and decides exactly as the pairwise scan it replaced."""

from __future__ import annotations

import random
from typing import Any

import pytest

import acn.editing.edit as editing
import acn.nodes.edit_context as edit_context
from acn.common.models import Message
from acn.common.settings import Settings
from acn.editing.edit import EditRules
from acn.nodes.edit_context import EditContextRequest
from acn.services.deps import Deps
from acn.text.numbers import extract_key_numbers, value_present
from acn.text.similarity import can_reach, shingle_similarity, shingles
from acn.text.tokens import load_tokenizer


@pytest.fixture(scope="module")
def deps() -> Deps:
    return Deps(settings=Settings(), tokenizer=load_tokenizer())


WORDS = ["超时", "设为", "30秒", "端口", "8080", "订单", "ORD-1", "ORD-2", "已发货", "please", "set", "the",
         "timeout", "to", "45", "seconds", "好的", "明白", "我们", "改成", "重试", "3次", "!", "。"]


def pairwise_oracle(messages: list[Message], droppable: list[bool], threshold: float) -> set[int]:
    """The O(n²) scan edit_context used before prefix filtering (a29ecb3), over the same candidates."""
    candidates = [i for i, m in enumerate(messages) if m.role in ("user", "assistant") and not m.tool_calls]
    sets = {i: shingles(messages[i].content) for i in candidates}
    dropped: set[int] = set()
    for position, index in enumerate(candidates):
        if not droppable[index] or index in dropped:
            continue
        message = messages[index]
        for other in candidates[position + 1:]:
            candidate = messages[other]
            if other in dropped or candidate.role != message.role or candidate.name != message.name:
                continue
            if candidate.content.strip() == message.content.strip():
                dropped.add(index)
                break
            if not can_reach(sets[index], sets[other], threshold):
                continue
            if shingle_similarity(sets[index], sets[other]) >= threshold and all(
                    value_present(n.value, candidate.content) for n in extract_key_numbers(message.content)):
                dropped.add(index)
                break
    return dropped


def random_conversation(rng: random.Random, size: int) -> list[Message]:
    base = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 8))) for _ in range(6)]
    messages = []
    for _ in range(size):
        text = rng.choice(base)
        if rng.random() < 0.4:  # a near-duplicate: one word changed, added or dropped
            words = text.split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            text = " ".join(words + ([rng.choice(WORDS)] if rng.random() < 0.3 else []))
        messages.append(Message(role=rng.choice(["user", "assistant"]), content=text))
    return messages


@pytest.mark.parametrize("seed", range(40))
def test_dedupe_decides_exactly_as_the_pairwise_scan(deps: Deps, seed: int) -> None:
    rng = random.Random(seed)
    messages = random_conversation(rng, rng.randint(2, 40))
    threshold = rng.choice([0.5, 0.7, 0.9, 1.0])
    rules = EditRules(drop_pleasantries=False, dedupe=True, near_duplicate_threshold=threshold)
    request = EditContextRequest(messages=messages, rules=rules, protect_last=0)
    response = edit_context.run(request, deps)
    dropped = {edit.index for edit in response.edits if edit.action == "dedupe"}
    latest_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=None)
    droppable = [i != latest_user for i in range(len(messages))]
    assert dropped == pairwise_oracle(messages, droppable, threshold)


def test_dedupe_compares_a_bounded_number_of_pairs_per_message(deps: Deps, monkeypatch: Any) -> None:
    # 2,000 distinct messages of similar length: the pairwise scan size-tested ~2,000,000 pairs (10 s here); digit
    # bigrams are few (100), so the prefixes of number-heavy messages still meet ~60 others each (118k tests).
    calls = 0

    def counting(a: frozenset[str], b: frozenset[str], threshold: float) -> bool:
        nonlocal calls
        calls += 1
        return can_reach(a, b, threshold)

    monkeypatch.setattr(editing, "can_reach", counting)
    rng = random.Random(7)
    messages = [Message(role="user", content=f"第{i}条：{rng.choice(WORDS)}{rng.randint(0, 10**9)} 用户说明 {i * 7919}")
                for i in range(2000)]
    request = EditContextRequest(messages=messages, rules=EditRules(dedupe=True), protect_last=0)
    edit_context.run(request, deps)
    assert calls <= len(messages) ** 2 // 20, calls  # the pairwise scan: ~n²/2 = 2,000,000


def test_many_near_duplicates_with_different_numbers_stay_bounded(deps: Deps, monkeypatch: Any) -> None:
    # Same words, different order ids: each is a near-duplicate of every other, and none is a duplicate.
    tests = 0
    real = editing.shingle_similarity

    def counting(a: frozenset[str], b: frozenset[str]) -> float:
        nonlocal tests
        tests += 1
        return real(a, b)

    monkeypatch.setattr(editing, "shingle_similarity", counting)
    messages = [Message(role="user", content=f"请帮我查询订单 ORD-{100000 + i} 的物流状态和预计送达时间，谢谢")
                for i in range(1500)]
    request = EditContextRequest(messages=messages, rules=EditRules(dedupe=True, drop_pleasantries=False),
                                 protect_last=0)
    response = edit_context.run(request, deps)
    assert not [e for e in response.edits if e.action == "dedupe"]
    assert tests <= (editing.MAX_DUPLICATE_TESTS + 1) * len(messages), tests
