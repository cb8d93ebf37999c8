"""A multi-line input (a pasted dialogue or text) is searched for its people's lines and, besides, for its last
few utterances (acn/retrieval/dialogue.py, acn/assembly/hops.py): the splitting rules on their own (zh and en),
how many searches an input costs, and through assemble on a real Milvus Lite store."""

from __future__ import annotations

from pathlib import Path

from flask.testing import FlaskClient

from acn.assembly.hops import DIALOGUE_WEIGHT, gathered
from acn.common.models import Memory
from acn.retrieval.dialogue import MAX_UTTERANCES, latest_utterances, lines_of, speaker_and_text, spoken_text
from acn.retrieval.hybrid_rank import Ranked
from acn.server import create_app
from tests.conftest import focused_memory_text, make_settings, post

ZH_DIALOGUE = ("<Bart>:\"嘿，你知道吗？元旦晚会我要表演魔术！\"\n"
               "<Assistant>:\"真是太棒了！我可以想象现场观众都被你的魔术吸引。\"\n"
               "<Bart>:\"我也会有点紧张呢，你有没有什么建议？\"\n"
               "<Assistant>:\"试着在表演前深呼吸。\"\n"
               "<Bart>:\"好的\"\n"
               "<Bart>:\"对了，我要穿什么好呢？\"\n")
EN_DIALOGUE = ("user: I'm going to perform a magic trick at the New Year's Eve party!\n"
               "assistant: That's fantastic! The audience will love it.\n"
               "user: I get a bit nervous. Any suggestions?\n"
               "assistant: Take a deep breath before the performance.\n"
               "user: By the way, what should I wear?")


def memory(key: str) -> Memory:
    return Memory(id=key, kind="turn", content=key, importance=5, scope="session", agent_id="a", session_id="s",
                  created_at=0, updated_at=0, version=1, turn_range=[0, 0])


def test_a_chinese_dialogue_splits_into_speakers_and_lines() -> None:
    lines = lines_of(ZH_DIALOGUE)
    assert [line.speaker for line in lines] == ["Bart", "Assistant", "Bart", "Assistant", "Bart", "Bart"]
    assert lines[1].assistant and not lines[0].assistant
    assert lines[0].text == "嘿，你知道吗？元旦晚会我要表演魔术！"
    assert speaker_and_text("用户：我的护照放哪了？") == ("用户", "我的护照放哪了？")
    assert speaker_and_text("助手：在书房") == ("助手", "在书房")


def test_the_latest_utterances_come_latest_first_without_speakers_or_pleasantries() -> None:
    # "好的" cues nothing; the assistant's latest line counts (it often names what the memory is about).
    assert latest_utterances(ZH_DIALOGUE) == ["对了，我要穿什么好呢？", "试着在表演前深呼吸。", "我也会有点紧张呢，你有没有什么建议？"]
    assert latest_utterances(EN_DIALOGUE) == ["By the way, what should I wear?",
                                              "Take a deep breath before the performance.",
                                              "I get a bit nervous. Any suggestions?"]
    assert len(latest_utterances("\n".join(f"line {n} about cats" for n in range(10)))) == MAX_UTTERANCES


def test_the_main_query_is_the_peoples_lines_without_their_speakers() -> None:
    assert spoken_text(EN_DIALOGUE) == ("I'm going to perform a magic trick at the New Year's Eve party!\n"
                                        "I get a bit nervous. Any suggestions?\nBy the way, what should I wear?")
    assert "Assistant" not in spoken_text(ZH_DIALOGUE) and "Bart" not in spoken_text(ZH_DIALOGUE)
    # A pasted text without speakers keeps every line; so does a dialogue of the assistant's lines only.
    assert spoken_text("第一行\n第二行\n第三行") == "第一行\n第二行\n第三行"
    assert spoken_text("assistant: 第一行\nassistant: 第二行") == "第一行\n第二行"


def test_a_single_line_or_a_time_or_a_url_is_not_a_dialogue() -> None:
    for text in ("我的护照放哪了？", "what should I wear?", "会议改到 10:30 了，在哪个会议室？",
                 "see https://example.com/a: what is it", "第一行\n第二行"):
        assert lines_of(text) == []
        assert latest_utterances(text) == []
        assert spoken_text(text) == text
    assert speaker_and_text("at 10:30 we met") == (None, "at 10:30 we met")
    assert speaker_and_text("https://example.com/x") == (None, "https://example.com/x")
    # A label used once is part of its line, not a speaker.
    assert [line.text for line in lines_of("Note: the VPN is down\nError: timeout\nwhat now?")] == [
        "Note: the VPN is down", "Error: timeout", "what now?"]
    # Two lines are a dialogue when both are spoken.
    assert latest_utterances("user: 我的猫叫什么？\nassistant: 我记不清了") == ["我记不清了", "我的猫叫什么？"]


def test_a_single_line_input_costs_exactly_one_search() -> None:
    asked: list[str] = []

    def search(text: str, k: int, pool: int | None = None) -> list[Ranked]:
        asked.append(text)
        return [Ranked(memory(text), 1.0, {})]

    gathered("我的护照放哪了？", search, 10)
    assert asked == ["我的护照放哪了？"]


def test_a_dialogue_costs_its_main_query_and_at_most_three_utterances_each_scaled_below_it() -> None:
    asked: list[str] = []

    def search(text: str, k: int, pool: int | None = None) -> list[Ranked]:
        asked.append(text)
        return [Ranked(memory(text), 2.0 if len(asked) == 1 else 0.5, {})]

    found = gathered(EN_DIALOGUE, search, 10)
    assert asked == [spoken_text(EN_DIALOGUE), *latest_utterances(EN_DIALOGUE)]
    assert len(asked) == 1 + MAX_UTTERANCES
    scores = {r.memory.id: r.score for r in found}
    # Each utterance's list is scaled so its best is DIALOGUE_WEIGHT of the main query's best.
    assert scores == {asked[0]: 2.0, **{text: round(2.0 * DIALOGUE_WEIGHT, 4) for text in asked[1:]}}


# --- through assemble, BM25 only, on a real Lite store ---------------------------------------------------------

NS = {"agent_id": "dialogue", "session_id": "dialogue-1"}
# The conversation is about a hike; what the user asks at the end (their passport) shares no word with it.
HIKE = ["周末去香山爬山了，山顶的风景特别美", "爬山的时候看到了山顶的日出", "山顶的日出真壮观，风景也好",
        "下次爬山要早点出发看日出", "香山的风景秋天最美，爬山的人很多", "爬山累了在山顶歇了一会儿看风景",
        "上次爬山拍了好多日出的照片", "周末爬山的路上风景不错", "山顶风大，看日出要多穿点", "爬山回来腿酸了两天"]
FILLER = ["中午吃了碗牛肉面", "楼下的桂花开了", "下午开了三个会", "外卖又超时了", "群里又在抢红包"]
TARGET = "护照放在书房第二个抽屉里了"
PASTED = ("小明：周末去香山爬山了，山顶的风景特别美，还看到了日出\n"
          "assistant：听起来很棒！爬山累不累？山顶的日出一定很壮观\n"
          "小明：有点累，不过山顶的风景和日出都很值得，下次爬山还去\n"
          "assistant：香山的风景秋天最美了\n"
          "小明：对了，我的护照放哪了？")


def feed(client: FlaskClient) -> None:
    for index, text in enumerate([*HIKE, *FILLER, TARGET]):
        body = {**NS, "messages": [{"role": "user", "content": text, "meta": {"date": f"2024-03-{1 + index:02d}"}}]}
        assert post(client, "record_turn", body).status_code == 200


def memory_text(client: FlaskClient, user_input: str) -> str:
    return focused_memory_text(client, NS, user_input)


def test_a_memory_cued_only_by_the_last_utterance_of_a_pasted_dialogue_is_in_the_context(tmp_path: Path) -> None:
    app = create_app(make_settings(tmp_path))
    try:
        client = app.test_client()
        feed(client)
        text = memory_text(client, PASTED)
        # The hike lines match most of the dialogue; the passport message matches only its last line (searched
        # as one query, the whole dialogue put it under the score floor: it was not in the context).
        assert TARGET in text
        assert any(line in text for line in HIKE)
    finally:
        app.extensions["acn"].close()
