"""jieba's prefix dictionary and tiktoken's ranks from the model cache: the same as the packages' own, sooner."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import jieba
import pytest
import tiktoken

from acn.text.model_cache import PROBE_TEXT, load_jieba_dictionary, load_offline_cl100k
from acn.text.tokens import OFFLINE_CL100K, load_tokenizer

TEXT = "超时时间设为30秒，订单号ORD-2024-0042的退款申请已提交给张经理"


@pytest.fixture(scope="module")
def reference() -> jieba.Tokenizer:
    tokenizer = jieba.Tokenizer()
    tokenizer.initialize()
    return tokenizer


def fresh(tmp_path: Path) -> jieba.Tokenizer:
    """A tokenizer whose own cache goes to an empty folder: if it initialises itself, a jieba.cache appears there."""
    tokenizer = jieba.Tokenizer()
    tokenizer.tmp_dir = str(tmp_path / f"jieba-own-{os.urandom(4).hex()}")
    os.makedirs(tokenizer.tmp_dir)
    return tokenizer


def built_its_own(tokenizer: jieba.Tokenizer) -> bool:
    return os.listdir(tokenizer.tmp_dir) != []


def entries(cache: Path) -> list[Path]:
    return sorted(cache.glob("jieba-*.pickle"))


def test_the_cached_dictionary_is_jiebas_own(tmp_path: Path, reference: jieba.Tokenizer) -> None:
    first = fresh(tmp_path)
    load_jieba_dictionary(first, tmp_path / "cache")
    assert built_its_own(first)  # nothing cached yet: jieba builds it, then it is cached
    [entry] = entries(tmp_path / "cache")
    assert entry.stat().st_mode & 0o077 == 0

    second = fresh(tmp_path)
    load_jieba_dictionary(second, tmp_path / "cache")
    assert second.initialized and not built_its_own(second)
    assert second.FREQ == reference.FREQ and second.total == reference.total
    assert second.lcut(TEXT) == reference.lcut(TEXT)
    assert list(second.cut_for_search(TEXT)) == list(reference.cut_for_search(TEXT))


def test_a_torn_entry_is_replaced(tmp_path: Path, reference: jieba.Tokenizer) -> None:
    load_jieba_dictionary(fresh(tmp_path), tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    entry.write_bytes(entry.read_bytes()[:5000])
    torn = fresh(tmp_path)
    load_jieba_dictionary(torn, tmp_path / "cache")
    assert built_its_own(torn) and torn.FREQ == reference.FREQ
    again = fresh(tmp_path)
    load_jieba_dictionary(again, tmp_path / "cache")
    assert not built_its_own(again) and again.FREQ == reference.FREQ


def test_an_entry_others_may_write_is_not_loaded(tmp_path: Path, reference: jieba.Tokenizer) -> None:
    load_jieba_dictionary(fresh(tmp_path), tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    os.chmod(entry, 0o646)
    tokenizer = fresh(tmp_path)
    load_jieba_dictionary(tokenizer, tmp_path / "cache")
    assert built_its_own(tokenizer) and tokenizer.FREQ == reference.FREQ


def test_no_cache_and_other_dictionaries_are_left_to_jieba(tmp_path: Path) -> None:
    plain = fresh(tmp_path)
    load_jieba_dictionary(plain, None)
    assert plain.initialized and built_its_own(plain)

    words = tmp_path / "words.txt"
    words.write_text("超时时间 100 n\n订单号 100 n\n", encoding="utf-8")
    custom = fresh(tmp_path)
    custom.set_dictionary(str(words))
    load_jieba_dictionary(custom, tmp_path / "cache")
    assert custom.initialized and set(custom.FREQ) == {"超", "超时", "超时时", "超时时间", "订", "订单", "订单号"}
    assert not (tmp_path / "cache").exists()


SAMPLES = [TEXT, PROBE_TEXT, "Refund order ORD-2024-0042 by Friday, 3:30 pm", "<|endoftext|> stays text", "🙂 emoji ok", "Say \"hi\"!"]


def encoded(encoding: tiktoken.Encoding) -> list[list[int]]:
    return [encoding.encode(text, disallowed_special=()) for text in SAMPLES]


def test_cached_ranks_encode_as_the_bundled_file(tmp_path: Path) -> None:
    reference = encoded(tiktoken.get_encoding(OFFLINE_CL100K))
    assert encoded(load_offline_cl100k(tmp_path / "cache")) == reference
    [entry] = sorted((tmp_path / "cache").glob("cl100k-*.pickle"))
    assert entry.stat().st_mode & 0o077 == 0
    assert encoded(load_offline_cl100k(tmp_path / "cache")) == reference
    assert encoded(load_offline_cl100k(None)) == reference


def test_an_entry_that_encodes_differently_is_rewritten(tmp_path: Path) -> None:
    reference = encoded(tiktoken.get_encoding(OFFLINE_CL100K))
    load_offline_cl100k(tmp_path / "cache")
    [entry] = sorted((tmp_path / "cache").glob("cl100k-*.pickle"))
    arguments, probe = pickle.loads(entry.read_bytes())
    ranks = dict(arguments["mergeable_ranks"])
    first, second = next(iter(ranks)), list(ranks)[1]
    ranks[first], ranks[second] = ranks[second], ranks[first]  # swapped ranks: a well-formed but wrong entry
    entry.write_bytes(pickle.dumps(({**arguments, "mergeable_ranks": ranks}, probe[:-1] + [probe[-1] + 1])))
    os.chmod(entry, 0o600)
    assert encoded(load_offline_cl100k(tmp_path / "cache")) == reference
    assert pickle.loads(entry.read_bytes())[0]["mergeable_ranks"] == tiktoken.get_encoding(OFFLINE_CL100K)._mergeable_ranks


def test_cl100k_base_is_the_bundled_copy() -> None:
    tokenizer = load_tokenizer("cl100k_base")
    assert tokenizer.name == OFFLINE_CL100K
    assert encoded(tokenizer.encoding) == encoded(tiktoken.get_encoding(OFFLINE_CL100K))
