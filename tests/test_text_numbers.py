"""Key-number extraction and the tolerant presence check."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from acn.text.numbers import KINDS, KeyNumber, extract_key_numbers, value_present

SEED = "我要在2026年6月30日之前把12万转到对公账户62938471"


def _values(text: str) -> list[str]:
    return [number.value for number in extract_key_numbers(text)]


def _by_value(text: str) -> dict[str, KeyNumber]:
    return {number.value: number for number in extract_key_numbers(text)}


def test_seed_sentence_values_kinds_and_labels() -> None:
    found = _by_value(SEED)
    assert list(found) == ["2026年6月30日", "12万", "62938471"]
    assert found["2026年6月30日"].kind == "date"
    assert found["12万"].kind == "amount"
    assert found["62938471"].kind == "account"
    assert found["62938471"].label == "账户"


@pytest.mark.parametrize(
    ("text", "value", "kind"),
    [
        ("价格239元", "239元", "amount"),
        ("总价¥239", "¥239", "amount"),
        ("总价￥1,200", "￥1,200", "amount"),
        ("It costs $1,200.50 in total", "$1,200.50", "amount"),
        ("预算1.5万元左右", "1.5万元", "amount"),
        ("pay 300 USD now", "300 USD", "amount"),
        ("转三千元给他", "三千元", "amount"),
        ("6月30号前交", "6月30号", "date"),
        ("发布于2025-03-17", "2025-03-17", "date"),
        ("due on March 5, 2026 please", "March 5, 2026", "date"),
        ("会议14:30开始", "14:30", "time"),
        ("下午3点开会", "下午3点", "time"),
        ("超时30秒", "30秒", "duration"),
        ("wait 45 seconds", "45 seconds", "duration"),
        ("大约2小时", "2小时", "duration"),
        ("3天内完成", "3天", "duration"),
        ("poll every 10 min", "10 min", "duration"),
        ("折扣15%", "15%", "percent"),
        ("增长百分之十五", "百分之十五", "percent"),
        ("订单ORD-20250317-8821已发货", "ORD-20250317-8821", "id"),
        ("工单TK_99812处理中", "TK_99812", "id"),
        ("see ticket #12345", "#12345", "id"),
        ("升级到v2.1.0吧", "v2.1.0", "version"),
        ("需要Python 3.11", "3.11", "version"),
        ("手机13812345678", "13812345678", "phone"),
        ("mail ops@example.com now", "ops@example.com", "email"),
        ("阈值0.9", "0.9", "number"),
        ("磁盘5GB", "5GB", "number"),
    ],
)
def test_kinds_and_verbatim_values(text: str, value: str, kind: str) -> None:
    found = _by_value(text)
    assert value in found, found
    assert found[value].kind == kind
    assert value in text


def test_parameter_value_is_labelled_with_its_name() -> None:
    found = _by_value("use top_k=3 please")
    assert found["3"].label == "top_k"


def test_labels_from_nearby_words() -> None:
    found = _by_value("超时时间设为30秒，订单号ORD-1-2，卡号6222020200001234567")
    assert found["30秒"].label == "超时"
    assert found["ORD-1-2"].label == "订单号"
    assert found["6222020200001234567"].label == "卡号"


def test_order_number_digits_become_an_id() -> None:
    found = _by_value("订单号 20250317882199")
    assert found["20250317882199"].kind == "id"


def test_contained_values_are_not_listed_separately() -> None:
    values = _values("In 2025 we shipped 2025-03-17; I have 3 cats")
    assert "2025-03-17" in values
    assert "2025" not in values
    assert "3" in values  # "3" is not inside "2025-03-17" as a number


def test_order_of_first_appearance_and_dedup() -> None:
    assert _values("金额239元，再说一次239元，日期2025-01-02") == ["239元", "2025-01-02"]


def test_full_width_digits_are_found_verbatim() -> None:
    assert "１２３４５６７８" in _values("账号１２３４５６７８")


def test_labels_are_never_empty_and_kinds_are_known() -> None:
    text = SEED + " ORD-1-2 3.5% 14:30 v1.2 wait 5 min 0.9 a@b.co 13912345678"
    for number in extract_key_numbers(text):
        assert number.label
        assert number.kind in KINDS


def test_plain_prose_has_no_key_numbers() -> None:
    assert extract_key_numbers("今天天气不错，我们聊聊吧。Nice weather today.") == []


@pytest.mark.parametrize(
    ("value", "text", "expected"),
    [
        ("120,000", "共120000元", True),
        ("120000", "共120,000元", True),
        ("３０秒", "等 30 秒", True),
        ("12万", "转 12 万", True),
        ("3", "30秒", False),
        ("3", "3.5", False),
        ("ORD-1-2", "订单ORD-1-2", True),
        ("62938471", "账户6293847", False),
    ],
)
def test_value_present(value: str, text: str, expected: bool) -> None:
    assert value_present(value, text) is expected


@given(st.text(max_size=200))
def test_values_are_substrings_and_present(text: str) -> None:
    for number in extract_key_numbers(text):
        assert number.value in text
        assert value_present(number.value, text)
