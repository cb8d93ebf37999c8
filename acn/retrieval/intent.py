"""What kind of recall an input asks for: one fact, or many (a count, a list, a comparison over several messages)."""

from __future__ import annotations

import re

# A question that counts, lists or compares needs every message that holds one of its items, each of which
# matches it only partly: recall fills the budget with many short hits by score instead of stopping at the few
# strongest (issue 17 §3).
_MANY = re.compile(
    r"哪些|哪几|几次|几个|几回|几天|几家|几本|几位|多少次|多少个|多少回|一共|总共|总计|共有|所有|全部|都有|都去|都买|都做|"
    r"分别|列出|列举|历次|每次|每一次|哪几次|比较|对比|相比|哪个更|更多|最多|最少|"
    r"\b(?:how many|how often|all the times|every time|each time|which ones|list|all of|in total|altogether|"
    r"compare|more than|the most|the least|times did|what are all)\b",
    re.IGNORECASE)


def wants_many(query: str) -> bool:
    """Return True when the input counts, lists or compares things said over several messages."""
    return _MANY.search(query) is not None
