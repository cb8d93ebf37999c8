"""How focused recall packs archived messages: shared date headers, the budget-scaled score floor, ceilings."""

from __future__ import annotations

from pathlib import Path

from flask.testing import FlaskClient

from acn.assembly.fit import Item, fit_text_items, layer_lines
from acn.assembly.layers import memory_items
from acn.assembly.recall import FLOOR_BUDGET, RELATIVE_FLOOR, relative_floor
from acn.common.models import Memory
from acn.memory.lines import dated_header, memory_line, render_memories, speaker_label
from acn.text.tokens import load_tokenizer
from bench import locomo, locomo_ceiling
from tests.conftest import post
from tests.test_bench_recall_smoke import SAMPLE
from tests.test_retrieval_hybrid import FILLER, record


def message(turn: int, content: str, date: str | None, name: str = "Ann") -> Memory:
    meta = {"name": name, "role": "user", **({"date": date} if date else {})}
    return Memory(id=f"m{turn}", kind="turn", content=content, importance=5, scope="session", agent_id="a",
                  session_id="s", created_at=0, updated_at=0, version=1, turn_range=[turn, turn], meta=meta)


def test_messages_of_one_day_share_one_header() -> None:
    items = memory_items([message(3, "third", "8 May, 2023"), message(1, "first", "8 May, 2023"),
                          message(9, "later", "20 May, 2023")], "en", load_tokenizer())
    fitted = fit_text_items(items, 500, load_tokenizer())
    lines = layer_lines(fitted.items)
    assert lines[1:3] == ["Ann: first", "Ann: third"] and lines[4] == "Ann: later"
    # The layer's first day header says where the lines come from; the next day's says its date alone, without
    # the year the header before it said.
    assert lines[0] == "[from memory · 2023-05-08]" and lines[3] == "[05-20]"


def test_undated_messages_keep_their_own_tag() -> None:
    items = memory_items([message(1, "first", None), message(2, "second", None)], "en", load_tokenizer())
    assert all(not item.group for item in items)
    assert all(item.variants[0].startswith("[from memory · turn") for item in items)


def test_a_kept_line_is_the_line_rendered_afresh() -> None:
    """memory_line keeps rendered lines; every field the line is made of must be part of its key."""
    base = message(4, "the parcel left on Monday", None)
    variants = [base, base.model_copy(update={"meta": {**base.meta, "name": "Bob"}}),
                base.model_copy(update={"meta": {**base.meta, "date": "8 May, 2023"}}),
                base.model_copy(update={"turn_range": [5, 5]}), base.model_copy(update={"valid_to": 1}),
                base.model_copy(update={"kind": "fact"}), base.model_copy(update={"content": "it left on Tuesday"})]
    for language in ("en", "zh"):
        for memory in [*variants, *variants]:  # the second round is served from what the first kept
            header = dated_header(memory, language)
            fresh = f"{speaker_label(memory, language)}: {memory.content}" if header else \
                render_memories([memory], language)
            assert memory_line(memory, language) == (fresh, header)
    assert len({memory_line(m, "en") for m in variants}) == len(variants)


def test_a_header_is_paid_once_and_the_budget_holds() -> None:
    tokenizer = load_tokenizer()
    header = "[from memory · 2023-05-08]"
    items = [Item(key=str(i), variants=[f"Ann: line number {i}"], order=(i,), group=header) for i in range(40)]
    budget = 120
    fitted = fit_text_items(items, budget, tokenizer)
    assert fitted.tokens <= budget
    assert layer_lines(fitted.items).count(header) == 1
    per_line = tokenizer.count("Ann: line number 10") + 1
    # Without sharing, every line would also carry the header.
    assert len(fitted.items) > (budget - 10) // (per_line + tokenizer.count(header) + 1)


def test_the_score_floor_falls_as_the_budget_grows() -> None:
    assert relative_floor(FLOOR_BUDGET // 2) == RELATIVE_FLOOR == relative_floor(FLOOR_BUDGET)
    assert relative_floor(2 * FLOOR_BUDGET) < RELATIVE_FLOOR
    assert relative_floor(4 * FLOOR_BUDGET) < relative_floor(2 * FLOOR_BUDGET)


def test_locomo_stores_are_reused_once_ingested(tmp_path: Path) -> None:
    conversation = locomo.parse(SAMPLE)
    first, seconds = locomo.evaluate((conversation, [600], ["none"], "focused", tmp_path, False))
    again, reused = locomo.evaluate((conversation, [600], ["none"], "focused", tmp_path, False))
    assert reused == seconds  # the marker's figure: nothing was recorded twice
    assert [o.recall for o in again[600]["ours (BM25)"]] == [o.recall for o in first[600]["ours (BM25)"]]


def test_ceilings_count_packing_and_ranking(tmp_path: Path) -> None:
    conversation = locomo.parse(SAMPLE)
    counts = locomo_ceiling.measure(conversation, [30, 600], "none", tmp_path, load_tokenizer())
    assert counts.questions == 3 and counts.evidence == 4
    assert counts.packed[600] == 4 and counts.unfit_questions[600] == 0
    assert counts.packed[30] < 4  # two evidence lines, their headers and the question need more than 30
    assert counts.ranked["50"] <= counts.ranked["150"] <= counts.ranked["all"] <= 4
    assert counts.ranked["all"] >= 2  # the bowl and the kitten are found by their words
    text = locomo_ceiling.report(counts, [30, 600], "none")
    assert "packing ceiling" in text and "| top all |" in text


def test_the_message_two_after_a_hit_is_served(client: FlaskClient, ns: dict[str, str]) -> None:
    record(client, ns, [("I saw a comet last night.", "Wow! What colour was it?", "4 May, 2023"),
                        ("Bright green with a long tail.", "Beautiful.", "4 May, 2023"), *FILLER])
    body = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 600,
                                     "user_input": "Tell me about the comet", "messages": []}).get_json()
    # The answer shares no word with the question: it is two messages after the line that matched.
    assert "Ann: Bright green with a long tail." in body["memory_text"]


def test_a_segment_too_long_for_its_layer_is_cut_to_fit_not_dropped() -> None:
    """Issue 17 §3: a compacted segment longer than the working layer's share was dropped whole (3,714 tokens
    against a few hundred), leaving the layer empty; the first segment is now cut to the room left."""
    from acn.assembly.fit import MIN_CUT_TOKENS, Item, fit_text_items
    from acn.text.tokens import load_tokenizer

    tokenizer = load_tokenizer()
    long_text = "[摘要 第1-80轮] 目标: 对账自动化 | 事实: " + "；".join(f"第{i}笔订单金额{i * 37}元" for i in range(400))
    segment = Item(key="seg-1", variants=[long_text], order=(0,), cut=True)
    fitted = fit_text_items([segment], 300, tokenizer)
    assert [item.key for item in fitted.items] == ["seg-1"] and not fitted.dropped
    assert fitted.tokens <= 300 and fitted.items[0].chosen.startswith("[摘要 第1-80轮] 目标: 对账自动化")
    whole = Item(key="seg-2", variants=[long_text], order=(0,))
    assert fit_text_items([whole], 300, tokenizer).items == []  # an item not marked cuttable is still dropped
    assert fit_text_items([Item(key="seg-3", variants=[long_text], order=(0,), cut=True)], MIN_CUT_TOKENS,
                          tokenizer).items == []  # too little room to say anything: dropped


def test_turns_excluded_from_recall_stay_in_the_history_layer_at_any_larger_budget() -> None:
    """Archived messages of the turns the history layer "surely shows" are not recall candidates. That set was
    the greedy fit at the layer's share, which skips a big turn and keeps an older small one; with the spare
    budget the layer later takes the big turn and the small one falls out, in neither layer (a MADial-en gold
    memory lost at 4k with everything else fitting). The set must stay in every larger fit."""
    from acn.assembly.fit import Item, fit_message_items, surely_kept
    from acn.common.models import Message
    from acn.text.tokens import load_tokenizer

    tokenizer = load_tokenizer()

    def turn(number: int, words: int) -> Item:
        return Item(key=f"turn-{number}", variants=[], order=(number,), source={"turn_range": [number, number]},
                    messages=[Message(role="user", content=" ".join(["word"] * words))])

    newest_first = [turn(3, 5), turn(2, 120), turn(1, 5)]
    share = sum(tokenizer.count_message(m) for t in (newest_first[0], newest_first[2]) for m in t.messages) + 2
    greedy = {i.key for i in fit_message_items(newest_first, share, tokenizer).items}
    assert greedy == {"turn-3", "turn-1"}  # what the layer used to promise
    kept = {i.key for i in surely_kept(newest_first, share, tokenizer)}
    for budget in range(share, 400, 7):
        assert kept <= {i.key for i in fit_message_items(newest_first, budget, tokenizer).items}, budget
    assert not greedy <= {i.key for i in fit_message_items(newest_first, 140, tokenizer).items}
