"""acn/retrieval/query_focus.py: the questions an input asks after its last self-correction (issue 28)."""

from __future__ import annotations

import pytest

from acn.retrieval.query_focus import after_correction, focus, split_sentences


@pytest.mark.parametrize(("text", "wanted", "dropped"), [
    ("今天好热。我想问问表哥生日是哪天？说错了，其实我想问表姐现在做什么工作？", "表姐现在做什么工作？", "表哥生日"),
    ("不是这个，我要问的是我的相机放哪了？", "我的相机放哪了？", "不是这个"),
    ("我舅舅多高？等等，搞混了，应该是我舅舅养了什么狗？", "我舅舅养了什么狗？", "多高"),
    ("Quick question, where is the tent? Wait, what I mean is: who borrowed the drone?", "who borrowed the drone?",
     "tent"),
    ("It's raining. Sorry, scratch that, what I actually want to know is where my cousin lives?",
     "where my cousin lives?", "raining"),
])
def test_the_focus_is_what_follows_the_last_correction(text: str, wanted: str, dropped: str) -> None:
    found = focus(text)
    assert found.questions == (wanted,)
    assert dropped in found.dropped and found.changed


def test_two_corrections_keep_only_the_last_question() -> None:
    found = focus("我组长用的什么手机？不是这个，我要问的是车展和谁去？哦不对，我真正想问的是室友在玩什么？")
    assert found.questions == ("室友在玩什么？",)
    assert "车展" in found.dropped and "手机" in found.dropped


@pytest.mark.parametrize(("text", "questions"), [
    ("跟爸妈去的那场是哪天？顺便问下，我房东生日是哪天？", ("跟爸妈去的那场是哪天？", "顺便问下，我房东生日是哪天？")),
    ("Where is the tent? Also, who has the drone?", ("Where is the tent?", "Also, who has the drone?")),
    ("The thing Tom borrowed: what did I pay? Plus, my aunt: what pet does she have?",
     ("The thing Tom borrowed: what did I pay?", "Plus, my aunt: what pet does she have?")),
])
def test_two_questions_are_split(text: str, questions: tuple[str, ...]) -> None:
    assert focus(text).questions == questions


def test_chit_chat_before_the_question_is_dropped_but_a_subject_it_points_back_to_stays() -> None:
    found = focus("今天好热啊，空调开了一整天。我表哥现在做什么工作？")
    assert found.questions == ("我表哥现在做什么工作？",) and "好热" in found.dropped
    pointed = "我表哥搬去成都了。他现在做什么工作？"
    assert focus(pointed).questions == (pointed,)  # 他 needs the sentence before: nothing dropped
    shared = "表哥最近换工作了。表哥现在在哪上班？"
    assert focus(shared).questions == (shared,)  # the statement shares 表哥 with the question: context, kept


@pytest.mark.parametrize("text", [
    "What did Caroline research?", "王一鸣家的狗叫什么名字？", "我的相机放哪了", "user: 你好\nassistant: 你好呀\nuser: 我的猫呢？",
    "说错了", "I also want to go.", "今天天气不错",
])
def test_a_plain_input_comes_back_as_itself(text: str) -> None:
    found = focus(text)
    assert found.questions == (text,) and not found.changed


def test_a_marker_at_the_end_replaces_nothing_and_a_long_text_is_left_whole() -> None:
    assert after_correction("我表哥在哪上班？说错了") == ("", "我表哥在哪上班？说错了")
    long = "我表哥在哪上班？" * 100 + "说错了，其实我想问表姐在哪？"
    assert focus(long).questions == (long,)


def test_sentences_split_on_ends_and_second_question_openers_not_inside_numbers() -> None:
    assert split_sentences("价格是3.5元。另外，在哪买的？") == ["价格是3.5元。", "另外，在哪买的？"]
    assert split_sentences("It costs 3.5 dollars. Also, where?") == ["It costs 3.5 dollars.", "Also, where?"]
    assert split_sentences("I also bought a tent.") == ["I also bought a tent."]


def test_a_message_typed_over_several_lines_is_read_line_by_line_and_a_pasted_dialogue_stays_whole() -> None:
    # Shift+Enter in a chat box: each line is a sentence of one message.
    typed = "今天好热\n我想问问表哥生日是哪天？\n说错了，其实我想问表姐现在做什么工作？"
    assert focus(typed).questions == ("表姐现在做什么工作？",)
    assert focus("我的相机放哪了？\n另外，我房东生日是哪天？").questions == ("我的相机放哪了？", "另外，我房东生日是哪天？")
    dialogue = "Bart: 我要表演魔术！\nAssistant: 说错了，其实我想问你想表演什么？\nBart: 你记得我上次表演吗？"
    assert focus(dialogue).questions == (dialogue,)  # speakers' lines are context (acn/retrieval/dialogue.py)
