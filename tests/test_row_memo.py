"""What is worked out from a stored row is kept with its Memory object (acn/common/row_memo.py, issue 47): worked
out again when a field it read changes, gone with the object, and never part of the memory's equality."""

from __future__ import annotations

import gc
import operator

from acn.assembly.layers import memory_items
from acn.assembly.recall import unreadable_reason
from acn.common.models import Memory
from acn.common.row_memo import MEMO, Memo, kept_names, remembered
from acn.common.stored import memory_problem
from acn.memory.lines import folded_content, memory_line, memory_line_cost, memory_line_parts
from acn.retrieval.hybrid_rank import memory_terms
from acn.text.similarity import normalise
from acn.text.terms import content_term_set
from acn.text.tokens import load_tokenizer
from tests.conftest import CountingTokenizer


def message(content: str = "我的收货电话改成 13957614382", **meta: object) -> Memory:
    return Memory(id="m1", kind="turn", content=content, importance=5.0, scope="session", agent_id="kefu",
                  session_id="chat", created_at=1_700_000_000_000, updated_at=1_700_000_000_000, version=1,
                  turn_range=[40, 40], meta={"role": "user", **meta})


def test_a_line_is_made_again_when_a_field_it_reads_changes() -> None:
    memory = message(time="2024-05-01")
    first = memory_line(memory, "zh")
    assert memory_line(memory, "zh") == first
    memory.meta["name"] = "王先生"  # changed in place: the key holds the values read, not the dict
    renamed = memory_line(memory, "zh")
    assert renamed != first and "王先生" in renamed[0] + renamed[1]
    assert renamed == memory_line(message(time="2024-05-01", name="王先生"), "zh")
    memory.content = "我的收货电话改成 13800000000"
    assert "13800000000" in memory_line(memory, "zh")[0]
    assert memory_line(memory, "en") == memory_line(message("我的收货电话改成 13800000000", time="2024-05-01",
                                                            name="王先生"), "en")


def test_a_lines_cost_is_counted_once_per_object_and_again_when_the_line_changes() -> None:
    """A memory line's tokens are kept with the memory (no process-wide cache other sessions' lines fill): the
    items of a second assemble over the same rows count nothing, and a changed line is counted afresh."""
    tokenizer = CountingTokenizer()
    memories = [message(), message("订单号 33622 的金额是 931 元", time="2024-05-01")]
    memories[1].id = "m2"
    items = memory_items(memories, "zh", tokenizer)
    lines = [memory_line(memory, "zh")[0] for memory in memories]
    assert [item.costs for item in items] == [[load_tokenizer().count(line) + 1] for line in lines]
    assert sorted(tokenizer.asked) == sorted(lines)
    tokenizer.asked.clear()
    assert memory_items(memories, "zh", tokenizer) == items and tokenizer.asked == []
    memories[0].content = "我的收货电话改成 13800000000"
    changed = memory_line(memories[0], "zh")[0]
    assert memory_line_cost(memories[0], "zh", tokenizer) == load_tokenizer().count(changed) + 1
    assert tokenizer.asked == [changed]
    english = memory_line(memories[0], "en")[0]
    assert memory_line_cost(memories[0], "en", tokenizer) == load_tokenizer().count(english) + 1
    # The other parts kept with the count follow the same fields: the folded text the layer dedupes by, the header.
    parts = memory_line_parts(memories[0], "zh", tokenizer)
    assert parts.folded == normalise("我的收货电话改成 13800000000") and parts.line == changed
    memories[0].meta = {**memories[0].meta, "time": "2024-06-02"}
    moved = memory_line_parts(memories[0], "zh", tokenizer)
    assert moved.header != parts.header and "2024-06-02" in moved.header and moved.short_header == "[2024-06-02]"


def test_a_folded_content_is_kept_and_follows_the_content() -> None:
    memory = message("订单号 33622，金额：931 元！")
    assert folded_content(memory) == normalise(memory.content) == "订单号33622金额931元"
    assert kept_names(memory) == ["folded"]
    memory.content = "改成 200 元。"
    assert folded_content(memory) == "改成200元"
    assert memory_line_parts(memory, "zh", load_tokenizer()).folded == "改成200元"


def test_a_rows_readability_is_kept_and_follows_its_kind_meta_and_stamps() -> None:
    memory = message(part="2")  # a stored row whose reserved meta field is not an integer
    assert unreadable_reason(memory).startswith("meta.part") and kept_names(memory) == ["unreadable"]
    memory.kind = "fact"  # only an archived message is placed by it
    assert unreadable_reason(memory) is None
    memory.kind = "turn"
    memory.meta = {"role": "user", "part": 2}
    assert unreadable_reason(memory) is None
    memory.updated_at = 10**15  # far in the future
    assert unreadable_reason(memory).startswith("updated_at")


def test_terms_and_checks_follow_the_content_and_stamps() -> None:
    memory = message()
    assert memory_terms(memory) == content_term_set(memory.content)
    memory.content = "订单号 33622 的金额是 931 元"
    assert memory_terms(memory) == content_term_set("订单号 33622 的金额是 931 元")
    assert memory_problem(memory) is None
    memory.turn_range = [40, 10**12]  # a replaced container is checked again
    assert memory_problem(memory) is not None and memory_problem(memory).startswith("turn_range")
    memory.turn_range = [40, 40]  # an equal copy of the first: usable again
    assert memory_problem(memory) is None
    memory.created_at = 10**15  # far in the future: no longer a usable stamp
    assert memory_problem(memory) is not None and memory_problem(memory).startswith("created_at")


def test_kept_values_leave_with_their_object_and_do_not_change_equality_or_dumps() -> None:
    memories = [message(f"第{i}轮：订单号 {10000 + i}") for i in range(50)]
    for memory in memories:
        memory_line(memory, "zh")
        memory_terms(memory)
    assert kept_names(memories[0]) == ["line:zh", "terms"]
    fresh = message("第0轮：订单号 10000")
    assert memories[0] == fresh and fresh == memories[0]  # the kept values are no field
    assert memories[0].model_dump() == fresh.model_dump()
    assert memories[0].model_dump_json() == fresh.model_dump_json()
    assert isinstance(memories[0].__dict__[MEMO], Memo)
    gc.collect()
    held = sum(isinstance(value, Memo) for value in gc.get_objects())
    del memories, memory
    gc.collect()
    assert sum(isinstance(value, Memo) for value in gc.get_objects()) == held - 50  # gone with their objects


def test_a_copy_works_out_its_own_values_and_leaves_its_original_s() -> None:
    original = message(time="2024-05-01")
    line = memory_line(original, "zh")
    stripped = original.model_copy(update={"meta": {"role": "user"}})  # shares the original's __dict__ entries
    assert kept_names(stripped) == []
    assert memory_line(stripped, "zh") != line and "2024" not in memory_line(stripped, "zh")[0]
    assert memory_line(stripped, "zh") == memory_line(message(), "zh")
    assert kept_names(original) == ["line:zh"] and original.__dict__[MEMO]["line:zh"][1] is line  # untouched
    assert memory_line(original, "zh") is line


def test_a_kept_value_costs_the_collector_one_object_a_row() -> None:
    # Every object kept here is visited by each full collection, a pause of every request (0.89 s at 887k tracked
    # objects, 32 chats of 250 turns): an entry is its dict of values on the object. A weak reference per entry and
    # its dict in tables keyed by id, as before, were two; with a callback closure and a tuple, five.
    rows = [message(f"第{number}轮") for number in range(10_000)]
    gc.collect()
    before = len(gc.get_objects())
    for number, row in enumerate(rows):
        remembered(row, "line", ("zh", number), operator.eq, lambda: "a line")
    gc.collect()
    added = len(gc.get_objects()) - before
    assert added <= 1.1 * len(rows), added / len(rows)
    del rows
    gc.collect()
