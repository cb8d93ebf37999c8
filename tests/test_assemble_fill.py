"""Focused assemble fills the budget its ranked hits leave (issue 28): the matches under the score floor, then,
BM25 only, the archived messages just older than the recent turns; what is fitted before it keeps its place."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from acn.assembly.fill import Fill
from acn.assembly.fit import fit_text_items
from acn.assembly.layers import memory_items
from acn.assembly.recall import focused_memories, relative_floor, turn_pool
from acn.common.models import Memory, Namespace
from acn.server import create_app
from acn.text.tokens import load_tokenizer
from tests.conftest import make_settings, post

NS = {"agent_id": "fill", "session_id": "notes", "user_id": "u1"}
HIT = 3  # the one message that matches the question, far from the recent turns
# Short turn notes that share no word with the question or with each other's subject.
NOTES = ["今天去菜市场买了{n}斤橙子", "下午和同事讨论了第{n}版的海报", "晚上跑步{n}公里，有点累",
         "周末整理书架，找到{n}本旧杂志", "给阳台的花浇水，第{n}盆开花了"]
COMPACT = {"context_window": 512, "trigger_ratio": 0.5, "keep_recent": 4, "segment_size": 6}


def record_notes(client: Any, count: int) -> None:
    for n in range(count):
        text = "物业把我的车位调到了B1-243" if n == HIT else NOTES[n % len(NOTES)].format(n=n + 2)
        response = post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": text}],
                                                "compaction": COMPACT})
        assert response.status_code == 200, response.get_data(as_text=True)


def test_bm25_only_focused_assemble_fills_the_leftover_budget_with_older_messages(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))  # embedder none
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        record_notes(client, 40)
        body = post(client, "assemble", {**NS, "mode": "focused", "user_input": "我的车位现在在哪？",
                                         "max_tokens": 1000, "working_summary": ""}).get_json()
        history = sorted(s["turn_range"][0] for s in body["sources"] if s["layer"] == "history")
        memory = {s["turn_range"][0] for s in body["sources"] if s["layer"] == "memory" and s["kind"] == "turn"}
        assert history and len(history) < 40 - HIT  # the recent turns are few: the rest is in the archive
        assert "B1-243" in body["memory_text"]  # the hit is served first
        # The message just older than the recent turns matches nothing, and fills part of the budget left over.
        assert history[0] - 1 in memory
        assert body["tokens"]["total"] <= 1000
        assert not [d for d in body["dropped"] if d["layer"] == "memory"]  # unused fill is not "dropped"
    finally:
        runtime.close()


def test_with_an_embedder_the_fill_is_the_search_under_the_floor_not_the_archive(tmp_path: Path) -> None:
    # With dense vectors the matches under the score floor fill what the hits leave (no further store read):
    # the messages just older than the recent turns come in only when the hybrid search found them.
    app = create_app(make_settings(tmp_path, embedder="hash"))
    runtime = app.extensions["acn"]
    try:
        client = app.test_client()
        record_notes(client, 40)
        question = "我的车位现在在哪？"
        body = post(client, "assemble", {**NS, "mode": "focused", "user_input": question,
                                         "max_tokens": 1000, "working_summary": ""}).get_json()
        history = {s["turn_range"][0] for s in body["sources"] if s["layer"] == "history"}
        memory = {s["turn_range"][0] for s in body["sources"] if s["layer"] == "memory" and s["kind"] == "turn"}
        below: list[Memory] = []
        served = focused_memories(Namespace(**NS), question, runtime.deps("default"), top_k=5,
                                  turn_pool=turn_pool(1000), history=[], shown_turns=history,
                                  floor=relative_floor(1000), spill=below)
        found = {m.turn_range[0] for m in [*served, *below] if m.kind == "turn" and m.turn_range}
        fill = {m.turn_range[0] for m in below if m.turn_range} - {m.turn_range[0] for m in served if m.turn_range}
        assert "B1-243" in body["memory_text"] and body["tokens"]["total"] <= 1000
        assert memory <= found  # nothing from the archive by position
        assert memory & fill  # the leftover budget holds matches under the floor
    finally:
        runtime.close()


def _memory(number: int, content: str, kind: str, turn: int) -> Memory:
    meta = {"role": "user" if number % 2 else "assistant", "date": f"2024-05-{turn % 28 + 1:02d}"}
    return Memory(id=f"m{number}", kind=kind, content=content, importance=3,  # type: ignore[arg-type]
                  scope="session", agent_id="a", session_id="s", created_at=turn, updated_at=turn, version=1, turn_range=[turn, turn], meta=meta)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(["订单 1", "订单 2", "Order 1", "order 1 ", "到了", "ok"]),
                               st.sampled_from(["fact", "turn"]), st.integers(1, 9)), max_size=12),
       split=st.integers(0, 12), language=st.sampled_from(["zh", "en"]))
def test_items_after_shown_memories_are_those_made_with_them(rows: list[tuple[str, str, int]], split: int,
                                                             language: str) -> None:
    # fill_items makes the fill's items after the served ones without rendering those again (issue 47): the
    # same items, ranks and groups as rendering the whole list and keeping the fill's part.
    memories = [_memory(number, content, kind, turn) for number, (content, kind, turn) in enumerate(rows)]
    shown, rest = memories[:split], memories[split:]
    whole = [item for item in memory_items([*shown, *rest], language, _TOKENIZER) if item.key not in {m.id for m in shown}]
    assert memory_items(rest, language, _TOKENIZER, shown=shown) == whole


_TOKENIZER = load_tokenizer()
_TEXTS = ["订单 31415 已发货", "我的快递单号是 SF1234567890，麻烦查一下", "ok", "The parcel left Hangzhou on 2024-05-03",
          "物业把我的车位调到了B1-243", "下午和同事讨论了第3版的海报，定稿时间改到周五"]


def _fill(served: list[Memory], spare: list[Memory], language: str) -> Fill:
    return Fill(lambda: list(spare), served, set(), set(), language, _TOKENIZER)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from(_TEXTS), st.sampled_from(["fact", "turn"]), st.integers(1, 9)),
                     max_size=14),
       split=st.integers(0, 14), budget=st.integers(0, 400), language=st.sampled_from(["zh", "en"]))
def test_the_fill_fitted_without_its_lines_is_the_fit_with_them(rows: list[tuple[str, str, int]], split: int,
                                                                 budget: int, language: str) -> None:
    # Issue 47: a full context's fill is not rendered when the room left cannot hold its cheapest line, and what
    # is kept, dropped and counted is exactly what fitting the fill's lines too gives (items are made twice: a fit
    # writes its choice into the items it is given).
    memories = [_memory(number, f"{content} #{number % 3}", kind, turn)
                for number, (content, kind, turn) in enumerate(rows)]
    served, spare = memories[:split], memories[split:]
    fill = _fill(served, spare, language)
    got = fill.fitted(memory_items(served, language, _TOKENIZER), budget, lambda items, room: fit_text_items(items, room,
                                                                                                  _TOKENIZER))
    whole = fit_text_items([*memory_items(served, language, _TOKENIZER), *_fill(served, spare, language).items], budget,
                           _TOKENIZER)
    assert [(item.key, item.chosen) for item in got.items] == [(item.key, item.chosen) for item in whole.items]
    assert got.tokens == whole.tokens
    served_keys = {memory.id for memory in served}
    assert [(i.key, t) for i, t in got.dropped if i.key in served_keys] == \
        [(i.key, t) for i, t in whole.dropped if i.key in served_keys]


def test_a_full_context_does_not_render_its_fill() -> None:
    served = [_memory(n, f"{_TEXTS[1]} 第{n}次", "turn", n) for n in range(1, 4)]
    spare = [_memory(n, f"{_TEXTS[5]} 第{n}次", "fact", n) for n in range(10, 60)]  # a line without a header
    fill = _fill(served, spare, "zh")
    items = memory_items(served, "zh", _TOKENIZER)
    alone = fit_text_items(memory_items(served, "zh", _TOKENIZER), 10_000, _TOKENIZER)
    # The room left after the served lines is one token short of the cheapest fill line: nothing is rendered.
    tight = alone.used + fill.cheapest - 1
    assert fill.fitted(items, tight, lambda i, room: fit_text_items(i, room, _TOKENIZER)).items == alone.items
    assert "items" not in vars(fill)  # the fill's lines were never made
    # One token more and the cheapest line fits: the lines are made and one is kept.
    roomy = fill.fitted(memory_items(served, "zh", _TOKENIZER), tight + 1, lambda i, room: fit_text_items(i, room, _TOKENIZER))
    assert "items" in vars(fill)
    assert len(roomy.items) == len(alone.items) + 1
