"""PII masking: ID cards, bank cards, mainland mobiles, e-mail."""

from __future__ import annotations

import pytest

from acn.text.pii import find_pii, luhn_valid, redact_pii


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("电话13812341234", "电话138****1234"),
        ("call +86 138 1234 5678 now", "call +86 138****5678 now"),
        ("身份证11010519491231002X", "身份证110105********002X"),
        ("身份证110105194912310021。", "身份证110105********0021。"),
        ("老身份证110105491231002", "老身份证110105********1002"),
        ("卡号6222 0202 0000 1234 567", "卡号**** **** **** 4567"),
        ("card 4111-1111-1111-1111", "card **** **** **** 1111"),
        ("4111111111111111", "**** **** **** 1111"),
        ("银行卡6222020200001234567", "银行卡**** **** **** 4567"),
        ("邮箱john.doe@example.com。", "邮箱j***@example.com。"),
    ],
)
def test_masks(text: str, expected: str) -> None:
    redacted, count = redact_pii(text)
    assert redacted == expected
    assert count == 1


def test_id_card_is_not_read_as_a_phone_or_card() -> None:
    assert find_pii("身份证号 11010519491231002X") == [("id_card", "11010519491231002X")]


def test_card_is_not_read_as_a_phone() -> None:
    kinds = [kind for kind, _ in find_pii("卡号 6222 0213 8123 4567 8")]
    assert kinds == ["bank_card"]


def test_long_order_number_without_checksum_or_card_word_is_left_alone() -> None:
    assert redact_pii("订单号2025031788219912") == ("订单号2025031788219912", 0)


def test_several_kinds_in_one_text() -> None:
    text = "电话13812341234，身份证11010519491231002X，卡号6222 0202 0000 1234 567，邮箱john@example.com"
    redacted, count = redact_pii(text)
    assert count == 4
    assert [kind for kind, _ in find_pii(text)] == ["id_card", "bank_card", "phone", "email"]
    for secret in ("13812341234", "11010519491231002X", "0202 0000", "john@"):
        assert secret not in redacted


@pytest.mark.parametrize("text", ["金额12万，超时30秒", "订单ORD-20250317-8821", "v2.1.0", "12345678901"])
def test_non_pii_is_untouched(text: str) -> None:
    assert redact_pii(text) == (text, 0)


def test_luhn() -> None:
    assert luhn_valid("4111111111111111")
    assert not luhn_valid("4111111111111112")
