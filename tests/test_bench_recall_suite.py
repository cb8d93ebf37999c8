"""bench/recall.py and bench/zh_daily.py: the dev/test recall suite, its generator, its scorer and a --quick run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from acn.text.tokens import load_tokenizer
from bench import recall, zh_daily
from bench.baselines import BM25Baseline, window_context
from bench.locomo import Line

TOKENIZER = load_tokenizer()


def test_zh_daily_is_deterministic_varied_and_split_by_seed() -> None:
    first, again = zh_daily.generate(zh_daily.seeds("test", 1)[0]), zh_daily.generate(zh_daily.seeds("test", 1)[0])
    assert first.messages == again.messages and first.questions == again.questions
    dev, test = zh_daily.seeds("dev", 300), zh_daily.seeds("test", 300)
    assert not set(dev) & set(test) and len(set(dev)) == 300
    assert {zh_daily.generate(s).split for s in dev[:3]} == {"dev"} and first.split == "test"
    categories: set[str] = set()
    questions: set[str] = set()
    for seed in dev[:10] + test[:10]:
        conversation = zh_daily.generate(seed)
        assert 150 <= len(conversation.messages) <= 300
        position = {m.id: i for i, m in enumerate(conversation.messages)}
        text = {m.id: m.text for m in conversation.messages}
        for question in conversation.questions:
            categories.add(question.category)
            questions.add(question.text)
            assert all(e in position for e in question.evidence), question
            if question.category in ("count", "list", "compare"):
                assert 2 <= len(question.evidence) <= 6, question
            if question.category == "changed":
                (newest,) = question.evidence
                assert question.answer is not None and question.answer in text[newest]
                assert question.answer not in question.text
            elif question.answer is not None:
                assert any(question.answer in text[e] for e in question.evidence), question
    assert categories == set(zh_daily.CATEGORIES)
    assert len(questions) > 60  # paraphrased templates, names and items: not one question over and over


def test_zh_daily_changed_fact_is_stated_before_it_changes() -> None:
    seen = 0
    for seed in zh_daily.seeds("dev", 6):
        conversation = zh_daily.generate(seed)
        index = {m.id: i for i, m in enumerate(conversation.messages)}
        for question in conversation.questions:
            if question.category == "changed":
                newest = index[question.evidence[0]]
                older = [i for i, m in enumerate(conversation.messages) if i != newest and any(
                    word in m.text for word in ("车位", "周会", "wifi密码", "租了房子", "搬"))]
                assert any(i < newest for i in older), question
                seen += 1
    assert seen >= 6


def _case(texts: list[str], question: str, evidence: int) -> recall.Case:
    lines = [Line(f"m{i}", "user", "user", t, 1, "2024-01-01") for i, t in enumerate(texts)]
    query = recall.Query(question, "single", [f"m{evidence}"], None, "test")
    return recall.Case("zh-daily", "tiny", [[line] for line in lines], [query])


def test_bm25_baseline_finds_the_evidence_and_the_window_does_not() -> None:
    filler = [f"今天天气不错，随便聊聊第{i}件小事" for i in range(80)]
    # In the middle: neither the newest messages nor the first ones (a ranking that ranks nothing) hold it.
    texts = filler[:40] + ["表哥王一鸣家新养了一只柯基，名字叫糯米"] + filler[40:]
    case = _case(texts, "王一鸣家的狗叫什么名字？", 40)
    raw, query = case.raw(), case.queries[0]
    folded = {line.dia_id: recall.fold(line.content) for line in case.lines}
    bm25 = BM25Baseline(raw).context(query.text, 300, TOKENIZER)
    window = window_context(raw, query.text, 300, TOKENIZER)
    assert bm25.tokens <= 300 and window.tokens <= 300
    assert recall.evidence_score(query, folded, bm25.text, set(bm25.ids))[0] == 1.0
    assert recall.evidence_score(query, folded, window.text, set(window.ids))[0] == 0.0


def test_evidence_score_folds_punctuation_but_needs_the_whole_message() -> None:
    query = recall.Query("q", "single", ["a", "b"], "糯米", "dev")
    folded = {"a": recall.fold("表哥家的柯基叫糯米。"), "b": recall.fold("车位换成了B2-110")}
    assert recall.evidence_score(query, folded, "[摘要] 事实: 表哥家的柯基叫糯米", set()) == (0.5, False, True)
    assert recall.evidence_score(query, folded, "柯基叫糯米", {"b"}) == (0.5, False, True)
    assert recall.evidence_score(query, folded, "nothing", set()) == (0.0, False, False)


DATA = recall.data_folder()
needs_data = pytest.mark.skipif(not (DATA / "madial_bench").exists(), reason="shared benchmark data not present")


@needs_data
def test_madial_cases_split_by_dialogue_id_and_hold_every_gold_memory() -> None:
    for language in ("zh", "en"):
        cases = recall.madial_cases(DATA, language, None)
        assert len(cases) == 2  # two users, one memory bank each
        queries = [q for c in cases for q in c.queries]
        assert len(queries) == 160 and {q.split for q in queries} == {"dev", "test"}
        assert sum(q.split == "dev" for q in queries) == 80
        for case in cases:
            bank = {line.dia_id for line in case.lines}
            assert all(set(q.evidence) <= bank and q.text for q in case.queries)
            assert [line.date for line in case.lines] == sorted(line.date for line in case.lines)


@needs_data
def test_quick_run_reports_every_suite_system_and_budget(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "recall.md"
    # hash and none keep the smoke run light; the full run uses USE for both (see bench/results/recall.md).
    code = recall.main(["--quick", "--workers", "1", "--ours-embedder", "none", "--dense-embedder", "hash",
                        "--out", str(out)])
    assert code == 0
    text = out.read_text(encoding="utf-8")
    printed = capsys.readouterr().out
    assert re.search(r"worst margin ours − bm25 on test: [+-]\d+\.\d points", printed)
    assert re.search(r"worst margin ours − bm25 on dev: [+-]\d+\.\d points", printed)
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    assert [s.split(" ")[0] for s in sections] == list(recall.SUITES)
    for section in sections:
        header = next(line for line in section.splitlines() if line.startswith("| system |"))
        assert header.startswith("| system | budget | dev | test | all | answer (test) |")
        for system in recall.SYSTEMS:
            for budget in (1000, 2000, 4000):
                row = next(line for line in section.splitlines() if line.startswith(f"| {system} | {budget} |"))
                cells = [c.strip() for c in row.strip("|").split("|")][2:]
                numbers = [float(c) for c in cells if c != "–"]
                assert numbers[:3] and all(0.0 <= n / 100 <= 1.0 for n in numbers), row
    zh = next(s for s in sections if s.startswith("zh-daily"))
    bm25_4k = next(line for line in zh.splitlines() if line.startswith("| bm25 | 4000 |"))
    assert float(bm25_4k.split("|")[5]) > 50.0  # all splits: BM25 finds most evidence with 4k tokens
