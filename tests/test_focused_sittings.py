"""Focused recall and sittings (issue 17): neighbours stay within their day, a message next to several hits
ranks above one next to a single hit, and the messages of a day with several strong hits outrank lone matches."""

from __future__ import annotations

from flask import Flask
from flask.testing import FlaskClient

from acn.assembly.recall import DAY_WEIGHT, NEIGHBOUR_DECAY, NEIGHBOUR_SUM, day_weighted, with_neighbours
from acn.common.auth import DEFAULT_TENANT
from acn.common.models import Memory, Namespace
from acn.retrieval.hybrid_rank import Ranked
from tests.conftest import post


def message(key: str, date: str, content: str = "a line") -> Memory:
    return Memory(id=key, kind="turn", content=content, importance=5, scope="session", agent_id="a",
                  session_id="s", created_at=0, updated_at=0, version=1, turn_range=[0, 0],
                  meta={"name": "Ann", "date": date})


def record_day(client: FlaskClient, ns: dict[str, str], date: str, pairs: list[tuple[str, str]]) -> None:
    for a, b in pairs:
        messages = [{"role": "user", "content": a, "name": "Ann", "meta": {"date": date}},
                    {"role": "assistant", "content": b, "name": "Bob", "meta": {"date": date}}]
        assert post(client, "record_turn", {**ns, "messages": messages}).status_code == 200


def test_a_day_with_several_strong_hits_outranks_a_lone_match() -> None:
    lone = Ranked(message("lone", "2023-05-01"), 0.50, {"bm25": 1.0})
    day = [Ranked(message(f"d{i}", "8 May, 2023"), score, {"bm25": 1.0}) for i, score in enumerate((0.48, 0.45, 0.44))]
    # A neighbour of that day adds nothing to its weight (its score is its hit's), but gains from it.
    near = Ranked(message("near", "2023-05-08"), 0.40, {"neighbour": 1.0})
    fact = Ranked(Memory(id="fact", kind="fact", content="a fact", importance=5, scope="session", agent_id="a",
                         session_id="s", created_at=0, updated_at=0, version=1), 0.49, {"bm25": 1.0})
    weighted = day_weighted([lone, fact, *day, near])
    order = [r.memory.id for r in weighted]
    assert order.index("d0") < order.index("lone")
    scores = {r.memory.id: r.score for r in weighted}
    assert scores["d0"] == round(0.48 * (1 + DAY_WEIGHT), 4)  # the heaviest day gains the full weight
    assert scores["lone"] == round(0.50 * (1 + DAY_WEIGHT * 0.50 / (0.48 + 0.45 + 0.44)), 4)
    assert scores["near"] == round(0.40 * (1 + DAY_WEIGHT), 4) and scores["fact"] == 0.49  # facts have no day


def test_undated_messages_keep_their_scores() -> None:
    undated = [Ranked(message(f"u{i}", ""), score, {"bm25": 1.0}) for i, score in enumerate((0.5, 0.4))]
    assert [(r.memory.id, r.score) for r in day_weighted(undated)] == [("u0", 0.5), ("u1", 0.4)]


def test_neighbours_stay_within_their_day(client: FlaskClient, ns: dict[str, str]) -> None:
    """On LoCoMo a session's first message pulled in the last lines of the session before (another day, another
    conversation): tokens spent on nothing the question asked."""
    record_day(client, ns, "7 May, 2023", [(f"Weather {i} looked cloudy today.", f"Yes, cloudy skies {i}.")
                                           for i in range(6)])
    record_day(client, ns, "1:56 pm on 8 May, 2023", [
        ("Bob, I ran a charity race for mental health last Saturday!", "That charity race sounds great, Ann!"),
        *[(f"Later we chatted about garden number {i}.", f"Garden {i} is lovely.") for i in range(4)]])
    body = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 2000, "messages": [],
                                     "user_input": "When did Ann run a charity race?"}).get_json()
    memory = body["memory_text"]
    assert "I ran a charity race" in memory and "That charity race sounds great" in memory
    assert "cloudy" not in memory  # the day before: no neighbour of a hit on 8 May
    assert "[from memory · 2023-05-07]" not in memory


def test_a_message_next_to_two_hits_gains_from_both(app: Flask, client: FlaskClient, ns: dict[str, str]) -> None:
    record_day(client, ns, "8 May, 2023", [("I glazed a pottery bowl today.", "Nice, what colour?"),
                                           ("Blue, and a pottery mug too.", "Lovely work.")])
    deps = app.extensions["acn"].deps(DEFAULT_TENANT)
    archived = deps.memories.archived_messages(deps.tenant, Namespace(**ns), [1, 2])
    by_text = {m.content: m for m in archived}
    first, second = by_text["I glazed a pottery bowl today."], by_text["Blue, and a pottery mug too."]
    hits = [Ranked(first, 0.6, {"bm25": 1.0}), Ranked(second, 0.5, {"bm25": 1.0})]
    found = {r.memory.content: r.score for r in with_neighbours(hits, Namespace(**ns), deps)}
    # "Nice, what colour?" sits between them: the reply after the first hit and the line before the second.
    between = found["Nice, what colour?"]
    single = max(round(0.6 * NEIGHBOUR_DECAY, 4), round(0.5 * NEIGHBOUR_DECAY, 4))
    assert between == round(single + NEIGHBOUR_SUM * round(0.5 * NEIGHBOUR_DECAY, 4), 4)
    # A hit that is also the neighbour of a better hit gains a share of that too.
    assert found["Blue, and a pottery mug too."] > 0.5


def test_a_long_date_meta_is_read_by_its_head_and_not_kept_whole() -> None:
    """A caller's `date` meta of 200k characters: its day is read from the head, and the text cache (bounded by
    bytes) does not keep the 200k-character key; with an unbounded lru_cache of whole values it did."""
    from acn.assembly.recall import MAX_DAY_CHARS, _day, message_day
    from acn.text.byte_cache import TEXT_CACHE

    head = "1:56 pm on 8 May, 2023"
    long = message(f"long-{id(head)}", head + " " + "x" * 200_000)
    before = TEXT_CACHE.bytes
    assert message_day(long) == "2023-05-08"
    assert TEXT_CACHE.bytes - before < 10_000
    assert not _day.holds(long.meta["date"]) and _day.holds(long.meta["date"].strip()[:MAX_DAY_CHARS])
