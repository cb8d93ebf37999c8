"""Milvus Lite's jieba analyzer, handed the product's cached segmentation.

Milvus Lite 3 runs inside this process, in pure Python, and segments the text of every row it stores for the BM25
field: JiebaAnalyzer.tokenize, jieba.cut_for_search over the whole text, ~0.1 ms for a memory line and about a
twentieth of a memory_write call's CPU at 100k memories in one namespace (measured with py-spy). The in-process
index already segments every text the same way (text.terms.bm25_tokens: jieba's own blocks, each short block's
tokens kept in the text cache), and a memory's blocks are mostly words the process has segmented before. So Lite
is handed that function: the same tokens, most of them segmented once per process instead of once per row.

The same tokens, or nothing changes: the hand-over is made only when both give the same tokens for SAMPLES (else
Lite keeps its own, with a warning), and tests hold both to jieba on random and real text. A Milvus server, or a
Lite server in a process of its own, segments with its own analyzer and is not touched.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from acn.text.terms import bm25_tokens

log = logging.getLogger("acn.store")

# Chinese, English, digits, punctuation between and inside blocks, full-width forms, mixed case, line breaks.
SAMPLES = (
    "我们决定把超时设为45秒，重试3次；订单号 ORD-20240917 已确认。",
    "Customer Erin prefers SMS between 10:00 and 1:00 at Globex (ticket #4521).",
    "下周二 10:30 和张伟开会\r\n讨论 Q3 预算：¥120,000 / 3.5% 折扣",
    "ＡＢＣ１２３ 全角 Ｔｅｘｔ, e-mail ops@example.com; v2.8.20 → ap-south",
    "",
)


def share_segmentation(segment: Callable[[str], Sequence[str]] = bm25_tokens) -> bool:
    """Have Milvus Lite's jieba analyzer (search mode) segment with `segment`, if it gives Lite's tokens for SAMPLES;
    return whether Lite now does (True also when it already did)."""
    try:
        from milvus_lite.analyzer.jieba_analyzer import JiebaAnalyzer
    except ImportError:  # a pymilvus without Lite: nothing segments in this process
        return False
    current = JiebaAnalyzer.tokenize
    if getattr(current, "shared_segmentation", False):
        return True

    def tokenize(self: Any, text: str) -> list[str]:
        if getattr(self, "_mode", None) != "search":
            return list(current(self, text))
        tokens = list(segment(text))
        stop_words = getattr(self, "_stop_words", None)
        return [token for token in tokens if token not in stop_words] if stop_words else tokens

    probe = JiebaAnalyzer(mode="search")
    differing = [sample for sample in SAMPLES if tokenize(probe, sample) != current(probe, sample)]
    if differing:
        log.warning("Milvus Lite keeps its own jieba segmentation: ours differs on %r", differing[0][:40])
        return False
    tokenize.shared_segmentation = True  # type: ignore[attr-defined]
    tokenize.original = current  # type: ignore[attr-defined]
    JiebaAnalyzer.tokenize = tokenize
    return True
