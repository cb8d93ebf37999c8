"""Small runs of the recall benchmarks (bench/locomo.py, bench/seed_recall.py) on tiny generated data."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from acn.text.tokens import load_tokenizer
from bench import locomo, seed_recall
from bench.baselines import BM25Baseline, Turn, window_context
from bench.scoring import Outcome, Tally, collect_ids, evidence_ids, score
from bench.seed_suite import generate

TOKENIZER = load_tokenizer()


def test_seed_suite_is_deterministic_and_shaped_as_specified() -> None:
    first, again = generate(4, 8), generate(4, 8)
    assert [s.turns for s in first] == [s.turns for s in again]
    assert [s.probes for s in first] == [s.probes for s in again]
    assert generate(5, 8)[0].turns != first[0].turns
    assert {s.domain for s in first} == {"customer_service", "data_cleaning", "finance_transfer", "travel_booking"}
    for session in first:
        assert 40 <= len(session.turns) <= 80
        said = "\n".join(m["content"] for turn in session.turns for m in turn)
        for probe in session.probes:
            assert probe.clue in said, probe
            assert probe.clue not in probe.question, probe  # the question never gives the answer away
            if probe.stale:
                assert said.index(probe.stale) < said.index(probe.clue), probe  # the old value comes first
    assert sum(len(s.probes) for s in generate(4, 32)) >= 150


def test_evidence_ids_normalise_irregular_strings() -> None:
    assert evidence_ids(["D8:6; D9:17", "D30:05", "D8:6", "nonsense"]) == ["D8:6", "D9:17", "D30:5"]


def test_score_counts_text_or_source_ids() -> None:
    texts = {"D1:1": "I went to a support group.", "D1:2": "That is great!"}
    recall, all_hit, answer = score(["D1:1", "D1:2"], texts, "Ann: I went to a support group. 7 May", {"D1:2"},
                                    "7 May")
    assert (recall, all_hit, answer) == (1.0, True, True)
    recall, all_hit, answer = score(["D1:1", "D1:2"], texts, "nothing", set(), None)
    assert (recall, all_hit, answer) == (0.0, False, None)
    assert collect_ids([{"meta": {"messages": [{"dia_id": "D1:1"}, {"dia_id": "D1:2"}]}}], "dia_id") == {"D1:1",
                                                                                                         "D1:2"}


def test_tally_summarises_per_category() -> None:
    tally = Tally()
    tally.add("x", Outcome("1", 1.0, True, True, 100, 5.0))
    tally.add("x", Outcome("2", 0.0, False, None, 300, 15.0))
    overall, first = tally.summary("x"), tally.summary("x", "1")
    assert overall["recall"] == 50.0 and overall["tokens"] == 200 and overall["answer"] == 100.0
    assert first["recall"] == 100.0 and tally.summary("x", "5") == {}


TURNS = [Turn(f"D1:{i}", f"Ann: message {i} about the weather and nothing much") for i in range(1, 60)]
TURNS[4] = Turn("D1:5", "Bob: my sister adopted a grey kitten named Pixel")


def test_window_keeps_the_newest_messages_within_budget() -> None:
    context = window_context(TURNS, "What did Bob's sister adopt?", 200, TOKENIZER)
    assert context.tokens <= 200
    assert context.ids[-1] == "D1:59" and "D1:5" not in context.ids


def test_bm25_baseline_finds_the_matching_turn_within_budget() -> None:
    context = BM25Baseline(TURNS).context("What did Bob's sister adopt? a kitten?", 200, TOKENIZER)
    assert context.tokens <= 200
    assert "D1:5" in context.ids


SAMPLE: dict[str, Any] = {
    "sample_id": "tiny-1",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bob! I went to a pottery class yesterday."},
            {"speaker": "Bob", "dia_id": "D1:2", "text": "Nice! What did you make?"},
            {"speaker": "Ann", "dia_id": "D1:3", "text": "A blue bowl with a fish on it.",
             "blip_caption": "a photo of a blue bowl"},
            {"speaker": "Bob", "dia_id": "D1:4", "text": "Lovely. I adopted a kitten named Pixel."},
        ],
        "session_2_date_time": "10:00 am on 20 May, 2023",
        "session_2": [{"speaker": "Bob", "dia_id": "D2:1", "text": f"Pixel knocked over plant number {i}."}
                      for i in range(1, 2)]
        + [{"speaker": "Ann" if i % 2 else "Bob", "dia_id": f"D2:{i}", "text": f"Small talk line {i} about rain."}
           for i in range(2, 30)],
        "session_3_date_time": "never held",
    },
    "qa": [
        {"question": "What did Ann make in the pottery class?", "answer": "A blue bowl", "evidence": ["D1:03"],
         "category": 4},
        {"question": "When did Ann go to a pottery class?", "answer": "7 May 2023", "evidence": ["D1:1"],
         "category": 2},
        {"question": "What did Bob adopt?", "evidence": ["D1:4; D2:1"], "category": 5,
         "adversarial_answer": "a puppy"},
        {"question": "No evidence at all?", "answer": "x", "evidence": [], "category": 1},
    ],
}


def test_locomo_parse_groups_turns_and_keeps_provenance() -> None:
    conversation = locomo.parse(SAMPLE)
    assert [q.evidence for q in conversation.questions] == [["D1:3"], ["D1:1"], ["D1:4", "D2:1"]]
    assert conversation.questions[2].answer is None
    third = conversation.lines[2]
    assert third.content.endswith("[shares a photo: a photo of a blue bowl]") and third.role == "user"
    turns = locomo.turns_of(conversation.lines)
    assert [line.dia_id for line in turns[0]] == ["D1:1", "D1:2"]
    assert [line.dia_id for line in turns[1]] == ["D1:3", "D1:4", "D2:1", "D2:2"]  # replies join the open turn
    message = locomo.message(conversation.lines[4])
    assert message["name"] == "Bob" and message["meta"] == {"dia_id": "D2:1", "session": 2,
                                                             "date": "10:00 am on 20 May, 2023"}


def test_locomo_evaluate_scores_ours_and_the_baselines_side_by_side(tmp_path: Path) -> None:
    conversation = locomo.parse(SAMPLE)
    outcomes, seconds = locomo.evaluate((conversation, [300, 600], ["none"], "focused", tmp_path, False))
    systems = {"window (last N tokens)", "BM25 over raw turns", "ours (BM25)"}
    assert set(outcomes[300]) == systems and set(seconds) == {"ours (BM25)"}
    ours = outcomes[600]["ours (BM25)"]
    assert len(ours) == 3 and all(o.tokens <= 600 and o.latency_ms is not None for o in ours)
    assert ours[0].recall == 1.0  # the bowl, from the archive, with its caption
    tallies = {budget: Tally() for budget in outcomes}
    for budget, by_system in outcomes.items():
        for system, rows in by_system.items():
            for row in rows:
                tallies[budget].add(system, row)
    text = locomo.report(tallies, seconds, "python -m bench.locomo --limit 1", 3, 1)
    assert "| ours (BM25) |" in text and "recall@600=" in text and "5 adversarial" in text


@pytest.mark.parametrize("embedder", ["none"])
def test_seed_recall_runs_one_session(tmp_path: Path, embedder: str) -> None:
    sessions = generate(4, 1)
    figures = seed_recall.run(sessions, budget=800, window=2000, embedder=embedder, sample=20, folder=tmp_path)
    assert len(figures.hits["focused"]) == len(sessions[0].probes)
    assert all(tokens <= 800 for tokens in figures.tokens["focused"])
    assert figures.numbers["kept"] == figures.numbers["in_source"]
    assert sum(figures.stale["focused"]) == 0
    text = seed_recall.report(figures, "python -m bench.seed_recall --sessions 1", 1, 800)
    assert "| focused |" in text and "| BM25 over raw turns |" in text


def test_ingest_bench_times_every_turn_and_counts_compactions() -> None:
    from bench import ingest

    conversation = locomo.parse(SAMPLE)
    result = ingest.ingest(conversation, "none")
    turns = locomo.turns_of(conversation.lines)
    assert len(result.times) == len(result.compacted) == len(turns) and all(t > 0 for t in result.times)
    text = ingest.report([result, result], "python -m bench.ingest --limit 1")
    row = next(line for line in text.splitlines() if line.startswith("| tiny-1 | "))
    assert row.split(" | ")[1] == str(len(turns)) and row.split(" | ")[6] == str(sum(result.compacted))
    assert next(line for line in text.splitlines() if line.startswith("| all | ")).split(" | ")[1] == str(2 * len(turns))
