"""A call that arrives before /readyz says ready (issue 47): what it waits for after a restart.

Measured on bench.scale --quick (a namespace of 10k memories in a store of 110k, the namespace's memory_retrieve sent
as soon as /healthz answered): 4.0-4.5 s, of which ~1 s loading the namespace's rows by id and ~0.7 s segmenting
their texts; the rest was the same texts segmented a second time by the background tokenizer and the start-up
warmer's work on other sessions beside it.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from acn.common.models import Memory
from acn.storage.database.base import Filter
from acn.storage.database.lite import local_index
from acn.storage.database.lite.local_index import LocalIndex


def test_two_threads_tokenizing_an_index_segment_each_text_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # A restart's first search tokenizes the rows of the index it loaded (search_text), and the background tokenizer
    # the same rows beside it: each segmented all of them. One pass is enough; the other waits for it.
    index = LocalIndex(0)
    for i in range(40):
        memory = Memory(id=f"m{i}", kind="fact", content=f"订单{i}的退款", scope="session", agent_id="a",
                        session_id="s", created_at=i, updated_at=i, version=1, importance=1.0)
        index.put(memory, {"id": memory.id, "content": memory.content, "kind": "fact"}, tokenize=False)
    segmented: list[str] = []
    tokens = local_index.bm25_tokens

    def slow_tokens(text: str) -> Any:
        segmented.append(text)
        time.sleep(0.002)  # jieba's time: the other thread starts while this one is under way
        return tokens(text)

    monkeypatch.setattr(local_index, "bm25_tokens", slow_tokens)
    start = threading.Barrier(2)

    def tokenize() -> None:
        start.wait()
        index.index_pending()

    threads = [threading.Thread(target=tokenize) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(segmented) == 40 and index.pending() == 0
    monkeypatch.setattr(local_index, "bm25_tokens", tokens)
    assert [memory.id for memory, _ in index.search_text("订单7的退款", Filter(""), 1)] == ["m7"]
