"""How the memory layer spends its tokens (issue 28): one "from memory" tag for the layer's days, no line that a
recent turn already shows; each line's own source stays in `sources`."""

from __future__ import annotations

from flask.testing import FlaskClient

from acn.assembly.fit import fit_text_items, layer_lines, text_layer_cost
from acn.assembly.layers import memory_items
from acn.common.models import Memory
from acn.text.tokens import MESSAGE_OVERHEAD_TOKENS, load_tokenizer
from tests.conftest import post

DAYS = [("2024-03-01", "周一去菜市场买了两斤橙子"), ("2024-03-02", "周二晚上跑步五公里"), ("2024-03-03", "周三看了一场电影")]


def message(turn: int, content: str, date: str) -> Memory:
    return Memory(id=f"m{turn}", kind="turn", content=content, importance=3, scope="session", agent_id="a",
                  session_id="s", created_at=0, updated_at=0, version=1, turn_range=[turn, turn],
                  meta={"role": "user", "date": date})


def test_only_the_first_day_header_says_from_memory_and_the_fit_counts_the_short_ones() -> None:
    tokenizer = load_tokenizer()
    items = memory_items([message(turn, text, date) for turn, (date, text) in enumerate(DAYS, 1)], "zh", tokenizer)
    expected = ["[来自记忆 · 2024-03-01]", "用户: 周一去菜市场买了两斤橙子",
                "[03-02]", "用户: 周二晚上跑步五公里",
                "[03-03]", "用户: 周三看了一场电影"]
    # What the fit charges for the short rendering (each line and its newline): a full tag per day does not fit.
    budget = MESSAGE_OVERHEAD_TOKENS + sum(tokenizer.count(line) + 1 for line in expected)
    fitted = fit_text_items(items, budget, tokenizer)
    assert layer_lines(fitted.items) == expected
    assert fitted.tokens == text_layer_cost(expected, tokenizer) and not fitted.dropped


def test_a_later_day_header_says_its_year_only_where_the_year_changes() -> None:
    tokenizer = load_tokenizer()
    days = [("2024-12-30", "年底盘点库存"), ("2024-12-31", "跨年夜吃了火锅"), ("2025-01-01", "元旦去爬山"),
            ("2025-01-02", "新年第一天上班")]
    items = memory_items([message(turn, text, date) for turn, (date, text) in enumerate(days, 1)], "zh", tokenizer)
    fitted = fit_text_items(items, 500, tokenizer)
    assert [line for line in layer_lines(fitted.items) if line.startswith("[")] == [
        "[来自记忆 · 2024-12-30]", "[12-31]", "[2025-01-01]", "[01-02]"]
    # The fit charged the year-less form for every later header; the exact count takes the year back and holds.
    assert fitted.tokens == text_layer_cost(layer_lines(fitted.items), tokenizer) <= 500


def test_grouped_lines_keep_their_own_source_in_the_response(client: FlaskClient, ns: dict[str, str]) -> None:
    for date, text in DAYS:
        message = {"role": "user", "content": text, "meta": {"date": date}}
        assert post(client, "record_turn", {**ns, "messages": [message]}).status_code == 200
    body = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 2000, "messages": [],
                                     "user_input": "我周一买了橙子、周二跑步、周三看电影，对吗？"}).get_json()
    assert body["memory_text"].splitlines() == ["[来自记忆 · 2024-03-01]", "用户: 周一去菜市场买了两斤橙子",
                                                "[03-02]", "用户: 周二晚上跑步五公里",
                                                "[03-03]", "用户: 周三看了一场电影"]
    memory = [s for s in body["sources"] if s["layer"] == "memory"]
    assert [(s["kind"], s["turn_range"], s["meta"]["date"]) for s in memory] == [
        ("turn", [1, 1], "2024-03-01"), ("turn", [2, 2], "2024-03-02"), ("turn", [3, 3], "2024-03-03")]


def test_a_memory_a_recent_turn_already_shows_is_not_repeated(client: FlaskClient,
                                                               ns: dict[str, str]) -> None:
    said = "物业把我的车位调到了B1-243"
    items = [{"kind": "fact", "content": said}, {"kind": "fact", "content": "车位的月租是三百元"}]
    assert post(client, "memory_write", {**ns, "items": items}).status_code == 200
    recent = [{"role": "user", "content": said}, {"role": "assistant", "content": "好的，记下了。"}]
    body = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 1000, "messages": recent,
                                     "user_input": "我的车位在哪？月租多少？"}).get_json()
    assert said in body["history_text"]
    memory = body["memory_text"].splitlines()
    assert memory == ["[来自记忆 · 事实] 车位的月租是三百元"]  # the fact the recent turn says is not repeated
    assert [s["kind"] for s in body["sources"] if s["layer"] == "memory"] == ["fact"]


def test_who_the_user_is_stays_in_the_memory_layer_while_a_recent_turn_shows_it(client: FlaskClient,
                                                                                  ns: dict[str, str]) -> None:
    # The memory layer is what a builder puts in the system prompt (Dify's read_context: memory_text): an identity
    # line dropped while its turn is in view would make that prompt change as the turns scroll.
    said = "我是VIP客户，我的订单号是 ORD-20250317-8821"
    assert post(client, "memory_write", {**ns, "items": [{"kind": "identity", "content": said}]}).status_code == 200
    recent = [{"role": "user", "content": f"{said}，请帮我查物流"}, {"role": "assistant", "content": "好的。"}]
    body = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 1000, "messages": recent,
                                     "user_input": "我的订单号是多少？"}).get_json()
    assert said in body["history_text"]
    assert [s["kind"] for s in body["sources"] if s["layer"] == "memory"] == ["identity"]
    assert "ORD-20250317-8821" in body["memory_text"]
