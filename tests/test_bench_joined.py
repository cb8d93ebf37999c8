"""bench/joined.py: the chained and rambling suites (issue 28) are deterministic, split by seed and well formed."""

from __future__ import annotations

import pytest

from bench import joined, recall


@pytest.mark.parametrize("language", joined.LANGUAGES)
def test_chain_questions_join_two_messages_that_share_only_the_entity(language: str) -> None:
    seed = joined.seeds("test", 1)[0]
    first, again = (joined.generate(seed, language, "chain") for _ in range(2))
    assert first.messages == again.messages and first.questions == again.questions and first.split == "test"
    categories = set()
    for seed in joined.seeds("dev", 4):
        conversation = joined.generate(seed, language, "chain")
        assert conversation.split == "dev" and len(conversation.questions) == joined.QUESTIONS
        text = {m.id: m.text for m in conversation.messages}
        for question in conversation.questions:
            categories.add(question.category)
            named, answering = question.evidence[:2]
            assert named != answering and question.answer is not None
            assert question.answer in text[answering] and question.answer not in question.text
            assert len(question.evidence) == (3 if question.category == "chain+1" else 2)
    assert categories == set(joined.CATEGORIES["chain"])


@pytest.mark.parametrize("language", joined.LANGUAGES)
def test_ramble_evidence_is_only_what_the_last_correction_asks(language: str) -> None:
    categories = set()
    markers = joined.LANGS[language].correct
    for seed in joined.seeds("dev", 4):
        conversation = joined.generate(seed, language, "ramble")
        haystack = joined.generate(seed, language, "chain")
        assert [m.text for m in conversation.messages] == [m.text for m in haystack.messages]  # one haystack
        text = {m.id: m.text for m in conversation.messages}
        for question in conversation.questions:
            categories.add(question.category)
            corrections = sum(question.text.lower().count(m.lower()) for m in markers)
            assert corrections == (2 if question.category == "ramble2" else 1), question.text
            assert question.answer is not None and question.answer in text[question.evidence[0]]
            assert len(question.evidence) == (2 if question.category == "ramble+1" else 1)
    assert categories == set(joined.CATEGORIES["ramble"])


def test_seeds_of_dev_and_test_are_disjoint_and_the_suites_are_wired() -> None:
    assert not set(joined.seeds("dev", 100)) & set(joined.seeds("test", 100))
    cases = recall.build_cases(["zh-chain", "en-ramble"], quick=True, conversations=2, folder=recall.data_folder())
    assert {c.suite for c in cases} == {"zh-chain", "en-ramble"}
    assert {q.split for c in cases for q in c.queries} == {"dev", "test"}
    assert all(set(q.evidence) <= {line.dia_id for line in c.lines} for c in cases for q in c.queries)
    only_dev = recall.build_cases(["zh-ramble"], quick=False, conversations=2, folder=recall.data_folder(),
                                  split="dev", joined_conversations=4)
    assert len(only_dev) == 2 and {q.split for c in only_dev for q in c.queries} == {"dev"}
