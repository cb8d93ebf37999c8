"""Focused recall reads the input's focus and takes a second hop (issue 28): acn/assembly/hops.py through assemble
on a real Milvus Lite store, and its merge and hop-query rules on their own."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask.testing import FlaskClient

from acn.assembly.hops import HOP_SEARCH_POOL, HOP_WEIGHT, gathered, hop_query, merged
from acn.common.models import Memory
from acn.retrieval.hybrid_rank import Ranked
from acn.server import create_app
from tests.conftest import focused_memory_text, make_settings, post

NS = {"agent_id": "hops", "session_id": "hops-1"}
FILLER = ["今天地铁好挤", "中午吃了碗牛肉面", "楼下的桂花开了", "下午开了三个会", "周末想出去走走", "外卖又超时了",
          "刚发现手机膜裂了", "群里又在抢红包", "晚上随便煮了碗面", "这个月花钱有点多了"]
FACTS = ["大学室友上个月搬去成都了", "表姐找了份设计师的活儿", "邻居家新养了一只柯基", "表哥一直用的是小米14",
         "大学室友最近转行当律师助理了", "舅舅最近迷上了钓鱼", "邻居最近转行当英语老师了", "表姐上个月搬去西安了"]


def memory(key: str, content: str = "a line") -> Memory:
    return Memory(id=key, kind="turn", content=content, importance=5, scope="session", agent_id="a",
                  session_id="s", created_at=0, updated_at=0, version=1, turn_range=[0, 0])


def feed(client: FlaskClient) -> None:
    # Each fact between three chatty lines (a dozen messages fit the 300-token context, not all forty).
    chatter = [f"{FILLER[i % len(FILLER)]}{'，' + str(i) if i >= len(FILLER) else ''}" for i in range(3 * len(FACTS))]
    lines = [text for index, fact in enumerate(FACTS) for text in (*chatter[3 * index:3 * index + 3], fact)]
    for index, text in enumerate(lines):
        meta = {"date": f"2024-03-{1 + index // 6:02d}"}
        assert post(client, "record_turn", {**NS, "messages": [{"role": "user", "content": text, "meta": meta}]}
                    ).status_code == 200


def memory_text(client: FlaskClient, question: str) -> str:
    return focused_memory_text(client, NS, question)


def test_a_chained_question_finds_the_message_that_shares_only_the_entity(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    try:
        client = app.test_client()
        feed(client)
        text = memory_text(client, "搬去成都的那位现在做什么工作？")
        assert "大学室友上个月搬去成都了" in text
        # The job message shares no word with the question (without the second hop it is not found).
        assert "大学室友最近转行当律师助理了" in text
    finally:
        app.extensions["acn"].close()


@pytest.mark.parametrize("question", [
    "中午吃了碗牛肉面。我想问问表哥用的是小米14吗？说错了，其实我想问舅舅最近迷上了什么？",
    # Typed over three lines, no speakers: one message with line breaks, not a pasted dialogue.
    "中午吃了碗牛肉面\n我想问问表哥用的是小米14吗\n说错了，其实我想问舅舅最近迷上了什么？",
])
def test_a_self_correction_retrieves_for_what_follows_it(tmp_path: Path, question: str) -> None:
    app = create_app(make_settings(tmp_path))
    try:
        client = app.test_client()
        feed(client)
        text = memory_text(client, question)
        assert "舅舅最近迷上了钓鱼" in text
        # The abandoned question is not retrieved for (it matches its message word for word: without the focus
        # that message is served).
        assert "表哥一直用的是小米14" not in text
    finally:
        app.extensions["acn"].close()


def test_lists_merge_with_each_best_scored_alike_and_a_memory_keeps_its_best() -> None:
    first = [Ranked(memory("a"), 0.8, {}), Ranked(memory("b"), 0.4, {})]
    second = [Ranked(memory("c"), 0.4, {}), Ranked(memory("b"), 0.2, {})]
    result = {r.memory.id: r.score for r in merged([first, second])}
    assert result == {"a": 0.8, "c": 0.8, "b": 0.4}
    assert merged([first]) is first


def test_hop_query_is_the_hits_rare_terms_then_what_the_question_still_asks() -> None:
    hit = Ranked(memory("h", "大学室友上个月搬去成都了"), 0.9, {})
    pool = [frozenset({"成都", "上个月"}), frozenset({"上个月"}), frozenset({"上个月"})] * 2
    query = hop_query(hit, ["搬去", "成都", "工作"], pool)
    assert "室友" in query.split() and query.endswith("工作") and "上个月" not in query.split()


def test_one_question_covered_by_its_best_hit_takes_one_search() -> None:
    calls: list[str] = []
    pools: list[int | None] = []

    def search(text: str, k: int, pool: int | None = None) -> list[Ranked]:
        calls.append(text)
        pools.append(pool)
        return [Ranked(memory(f"m{len(calls)}", "表哥的生日是3月5号"), 0.9, {})]

    assert [r.memory.id for r in gathered("表哥的生日是哪天？", search, 10)] == ["m1"] and len(calls) == 1
    gathered("生日在3月5号的那个人平时用什么牌子的手机？", search, 10)  # the hit leaves 手机 unsaid: a hop for it
    assert len(calls) == 3 and "手机" in calls[-1]
    # The hop keeps its best HOP_POOL: each of its legs takes HOP_SEARCH_POOL candidates, not the first pass's.
    assert pools[1:] == [None, HOP_SEARCH_POOL]
    hop = gathered("生日在3月5号的那个人平时用什么牌子的手机？", search, 10)
    assert all(r.score <= 0.9 for r in hop) and any(r.score == round(0.9 * HOP_WEIGHT, 4) for r in hop)
