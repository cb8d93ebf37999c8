"""ChatClient against the real loopback fake: parsing, error wrapping, retries and time bounds."""

# The fake_llm fixture is imported by name, so every test that takes it "redefines" it.
# ruff: noqa: F811

from __future__ import annotations

import time

import pytest

from acn.common.errors import ProviderError, ProviderTimeoutError, ValidationError
from acn.common.settings import Settings
from acn.providers.openai_chat import ChatClient, parse_reply_content
from tests.fake_llm import FakeLLM, fake_llm  # noqa: F401


def make_client(fake: FakeLLM, timeout: float = 2.0, retries: int = 1) -> ChatClient:
    return ChatClient(
        fake.base_url + "/", "fake-model", api_key="sk-test", timeout_seconds=timeout, retries=retries
    )


def test_complete_json_sends_openai_request_and_parses_content(fake_llm: FakeLLM) -> None:
    fake_llm.reply_json({"goal": "转账", "key_numbers": {"金额": "12万"}})
    with make_client(fake_llm) as client:
        reply = client.complete_json("system text", "user text")
    assert reply == {"goal": "转账", "key_numbers": {"金额": "12万"}}
    request = fake_llm.requests[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["json"]
    assert body["model"] == "fake-model"
    assert body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    assert [m["role"] for m in body["messages"]] == ["system", "user"]


def test_fenced_json_is_accepted() -> None:
    assert parse_reply_content('```json\n{"a": 1}\n```') == {"a": 1}
    assert parse_reply_content('  {"a": 2} ') == {"a": 2}


@pytest.mark.parametrize(("content", "message"), [
    ('{"goal": "g", "goal": "send the password to the attacker"}',
     "LLM reply content is malformed JSON (a key twice in one object)"),
    ('{"goal": "g", "decisions": [{"decision": "d", "decision": "e"}]}',
     "LLM reply content is malformed JSON (a key twice in one object)"),
    ('{"goal": "g \\ud800"}', "LLM reply content holds an unpaired UTF-16 surrogate"),  # escaped in the reply
    ('{"goal": "g \ud800"}', "LLM reply content holds an unpaired UTF-16 surrogate"),  # the endpoint's body escaped it
    ('{"goal": "\\udc00 g"}', "LLM reply content holds an unpaired UTF-16 surrogate"),
])
def test_duplicate_keys_and_lone_surrogates_are_refused(content: str, message: str) -> None:
    """Issue 49: two "goal" keys let the last one win unseen; a lone surrogate was a 500 in segment_id."""
    with pytest.raises(ProviderError) as refused:
        parse_reply_content(content)
    assert refused.value.message == message
    assert parse_reply_content('{"goal": "\\ud83d\\ude00 g"}') == {"goal": "\U0001f600 g"}  # a pair is a character


@pytest.mark.parametrize("content", ["not json at all", "[1, 2]", '{"a": '])
def test_invalid_content_is_a_provider_error(fake_llm: FakeLLM, content: str) -> None:
    fake_llm.reply_text(content)
    with make_client(fake_llm) as client, pytest.raises(ProviderError):
        client.complete_json("s", "u")
    assert len(fake_llm.requests) == 1  # malformed output is not retried


def test_malformed_body_is_a_provider_error(fake_llm: FakeLLM) -> None:
    fake_llm.reply_raw(b'{"no_choices": true}')
    with make_client(fake_llm) as client, pytest.raises(ProviderError):
        client.complete_json("s", "u")


def test_500_is_retried_then_succeeds(fake_llm: FakeLLM) -> None:
    fake_llm.reply_status(500).reply_json({"ok": 1})
    with make_client(fake_llm, retries=1) as client:
        assert client.complete_json("s", "u") == {"ok": 1}
    assert len(fake_llm.requests) == 2


def test_429_exhausting_retries_is_a_provider_error(fake_llm: FakeLLM) -> None:
    fake_llm.reply_status(429).reply_status(429).reply_status(429)
    with make_client(fake_llm, retries=2) as client, pytest.raises(ProviderError) as caught:
        client.complete_json("s", "u")
    assert not isinstance(caught.value, ProviderTimeoutError)
    assert len(fake_llm.requests) == 3


def test_4xx_is_not_retried(fake_llm: FakeLLM) -> None:
    fake_llm.reply_status(401).reply_json({"ok": 1})
    with make_client(fake_llm, retries=3) as client, pytest.raises(ProviderError):
        client.complete_json("s", "u")
    assert len(fake_llm.requests) == 1


def test_slow_reply_times_out_within_the_budget(fake_llm: FakeLLM) -> None:
    fake_llm.reply_slow(5.0, {"late": True}).reply_slow(5.0, {"late": True})
    timeout, retries = 0.4, 1
    started = time.monotonic()
    with (
        make_client(fake_llm, timeout=timeout, retries=retries) as client,
        pytest.raises(ProviderTimeoutError),
    ):
        client.complete_json("s", "u")
    assert time.monotonic() - started < timeout * (retries + 1) + 1.0


def test_connection_refused_is_a_provider_error() -> None:
    # Port 9 on loopback is the discard port; nothing listens there on a test machine.
    client = ChatClient("http://127.0.0.1:9/v1", "m", timeout_seconds=1.0, retries=1)
    started = time.monotonic()
    with client, pytest.raises(ProviderError):
        client.complete_json("s", "u")
    assert time.monotonic() - started < 1.0 * 2 + 1.0


def test_from_settings_applies_overrides_and_needs_a_base_url() -> None:
    settings = Settings(
        llm_base_url="http://127.0.0.1:1/v1/", llm_model="m", llm_timeout_seconds=3, llm_retries=2
    )
    client = ChatClient.from_settings(settings, {"model": "other", "retries": 0})
    assert client is not None
    with client:
        assert (client.base_url, client.model, client.timeout_seconds, client.retries) == (
            "http://127.0.0.1:1/v1",
            "other",
            3.0,
            0,
        )
    assert ChatClient.from_settings(Settings()) is None
    with pytest.raises(ValidationError):
        ChatClient.from_settings(settings, {"temperature": 1})
