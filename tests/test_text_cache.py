"""The text caches (folded texts, shingles, BM25 tokens, content terms) hold at most ACN_TEXT_CACHE_MB, by bytes."""

from __future__ import annotations

import gc
import random
import sys
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import acn.text.byte_cache as byte_cache
import acn.text.similarity as similarity
import acn.text.terms as terms
from acn.app.runtime import Runtime
from acn.text.byte_cache import DEFAULT_BYTES, ENTRY_BYTES, TEXT_CACHE, ByteLRU, text_bytes
from tests.conftest import make_settings

BUDGET = 4 << 20
# Every cached text function, with what it computes uncached.
FUNCTIONS: list[tuple[Callable[[str], Any], Callable[[str], Any]]] = [
    (similarity.normalise, similarity._normalise),
    (similarity.shingles, similarity._shingles),
    (terms.bm25_tokens, terms._bm25_tokens),
    (terms.content_terms, lambda text: list(terms._content_terms.__wrapped__(text))),  # type: ignore[attr-defined]
    (terms.content_term_set, lambda text: frozenset(terms._content_terms.__wrapped__(text))),  # type: ignore
    (terms.stem, terms.stem.__wrapped__),  # type: ignore[attr-defined]
]


@pytest.fixture(autouse=True)
def _fresh_cache() -> Iterator[None]:
    TEXT_CACHE.clear()
    TEXT_CACHE.resize(BUDGET)
    yield
    TEXT_CACHE.clear()
    TEXT_CACHE.resize(DEFAULT_BYTES)


def texts(count: int, length: int, seed: int = 7) -> list[str]:
    """Distinct texts of Chinese, English words, IDs and punctuation (a bounded alphabet, as real text has)."""
    rng = random.Random(seed)
    words = ["订单", "物流", "已发货", "发票", "抬头", "上海", "客户", "送达", "仓库", "退款", "invoice", "shipped",
             "delayed", "billing", "customer", "storm", "March", "ORD-2024", "INV-77", "，", "。", " ", "3.14", "42"]
    out = []
    for index in range(count):
        body = []
        while sum(map(len, body)) < length:
            body.append(rng.choice(words))
        out.append(f"{index}:" + "".join(body))
    return out


def held_bytes(action: Callable[[], None]) -> int:
    """Bytes still allocated after action, its temporaries gone (what the caches kept)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        action()
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_large_texts_stay_within_the_budget_counted_and_measured() -> None:
    terms.bm25_tokens("预热")  # jieba's dictionary, loaded once per process, is not the cache's
    many = texts(300, 3_000)  # unbounded by bytes, these alone kept ~60 MB (shingle sets of 3,000 characters)

    def use_all() -> None:
        for text in many:
            for cached, _ in FUNCTIONS[:5]:
                cached(text)

    held = held_bytes(use_all)
    assert 0 < TEXT_CACHE.bytes <= BUDGET
    # What the process really holds for them (tracemalloc) is within the budget: the count errs on the safe side.
    assert held <= BUDGET * 1.1, f"the text caches hold {held / 2**20:.1f} MB with a {BUDGET >> 20} MB budget"
    assert len(TEXT_CACHE) > 0


def test_results_are_the_functions_own_kept_evicted_or_not_kept() -> None:
    sample = texts(40, 300, seed=1) + texts(3, 5_000, seed=2) + ["", "a", "researching", "Ｆｕｌｌ－ｗｉｄｔｈ ＡＢＣ"]
    for budget in (BUDGET, 16 << 10, 0):  # room for all; constant eviction; nothing kept
        TEXT_CACHE.clear()
        TEXT_CACHE.resize(budget)
        for _ in range(2):  # computed, then (where kept) read back
            for text in sample:
                for cached, uncached in FUNCTIONS:
                    assert cached(text) == uncached(text)
        assert TEXT_CACHE.bytes <= budget
    assert len(TEXT_CACHE) == 0


def test_least_recently_used_leave_first_by_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(byte_cache, "MAX_SHARE", 1.0)  # entries this large relative to the budget are kept
    small, other, large = "a" * 100, "b" * 100, "c" * 300

    def cost(text: str) -> int:  # the entry, its key and its value (a string as long as the key)
        return ENTRY_BYTES + 2 * sys.getsizeof(text)

    cache = ByteLRU(max_bytes=cost(small) + cost(other) + cost(large) - 1)  # one short of room for all three
    calls: list[str] = []

    @cache.cached(text_bytes)
    def upper(text: str) -> str:
        calls.append(text)
        return text.upper()

    upper(small)
    upper(other)
    upper(small)  # used again: now the most recent
    upper(large)
    assert cache.bytes <= cache.max_bytes
    assert upper.holds(small) and upper.holds(large) and not upper.holds(other)  # type: ignore[attr-defined]
    calls.clear()
    assert upper(small) == small.upper() and calls == []


def test_a_value_too_large_for_its_share_is_returned_and_not_kept() -> None:
    cache = ByteLRU(max_bytes=16_000)
    copy = cache.cached(text_bytes)(lambda text: text + "")
    huge = "x" * 5_000  # 2 × 5 KB: above 1/16 of 16 KB
    assert copy(huge) == huge
    assert len(cache) == 0 and cache.bytes == 0


def test_the_runtime_sets_the_budget_from_acn_text_cache_mb(tmp_path: Path) -> None:
    runtime = Runtime.open(make_settings(tmp_path, embedder="none", text_cache_mb=3))
    try:
        assert TEXT_CACHE.max_bytes == 3 << 20
    finally:
        runtime.close()
