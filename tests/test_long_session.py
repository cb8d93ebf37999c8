"""Issue 47: a turn costs the same late in a number-rich chat as early (the working state is bounded by tokens)."""

from __future__ import annotations

import random
from typing import Any

from flask.testing import FlaskClient

from acn.common.models import Decision, Segment
from acn.compaction.rollup import MIN_OLDEST_TOKENS, TRIM_MARGIN, TRIM_SLACK, roll_up, summary_cap, trim_segment
from acn.compaction.segment_lines import finish_segment
from acn.text.tokens import load_tokenizer
from bench.long_session import PHONE, PHONE_QUESTION, PHONE_TURN, answer_message, user_message
from tests.conftest import CountingTokenizer, post

WINDOW = 2000  # a small window, so that the cap (summary_cap of 0.4 × 2,000) is reached within a few dozen turns
CAP = summary_cap(0.4 * WINDOW)


def record(client: FlaskClient, ns: dict[str, str], turns: range, rng: random.Random) -> None:
    for turn in turns:
        body = {**ns, "messages": [{"role": "user", "content": user_message(turn, rng)},
                                   {"role": "assistant", "content": answer_message(turn, rng)}],
                "compaction": {"context_window": WINDOW}}
        answer = post(client, "record_turn", body)
        assert answer.status_code == 200, answer.get_json()


def state_of(client: FlaskClient, ns: dict[str, str]) -> dict[str, Any]:
    state: dict[str, Any] = post(client, "session_state", ns).get_json()
    return state


def test_working_state_stays_under_its_cap_as_turns_go_by(client: FlaskClient, ns: dict[str, str]) -> None:
    """At turn 60 and at turn 150 the segments hold at most the cap's tokens, or the oldest one its minimum beside
    the newer ones (it grew by a line a turn before); the oldest segment still spans the conversation from turn 1,
    and what the working state carries is the same size late as early."""
    rng = random.Random(3)
    record(client, ns, range(1, 61), rng)
    early = state_of(client, ns)
    record(client, ns, range(61, 151), rng)
    late = state_of(client, ns)
    for state in (early, late):
        newer = sum(segment["tokens"] for segment in state["segments"][1:])
        assert state["segments"][0]["tokens"] + newer <= max(CAP, MIN_OLDEST_TOKENS + newer)
        assert state["segments"][0]["turn_range"][0] == 1
    assert late["segments"][-1]["turn_range"][1] > early["segments"][-1]["turn_range"][1]
    late_lines = sum(len(s["done"]) + len(s["facts"]) + len(s["key_numbers"]) for s in late["segments"])
    early_lines = sum(len(s["done"]) + len(s["facts"]) + len(s["key_numbers"]) for s in early["segments"])
    assert late_lines <= early_lines + 10


def test_a_number_rolled_out_of_the_summary_is_still_found(client: FlaskClient, ns: dict[str, str]) -> None:
    """By turn 150 the order numbers of the early turns have left the working state; the archive still holds
    and the memory still hold each one word for word (memory_retrieve finds it first), and the delivery phone of turn 40, a statement in force,
    is in the focused context when the user asks for it."""
    rng = random.Random(5)
    record(client, ns, range(1, 151), rng)
    early = [user_message(turn, random.Random(5)) for turn in range(1, 2)][0]
    order = early.split("订单号 ")[1].split(" ")[0]
    summary = "".join(segment["text"] for segment in state_of(client, ns)["segments"])
    assert order not in summary
    found = post(client, "memory_retrieve", {**ns, "query": f"订单号 {order}", "top_k": 3}).get_json()["memories"]
    assert order in found[0]["content"]
    context = post(client, "assemble", {**ns, "mode": "focused", "max_tokens": 1500,
                                        "user_input": PHONE_QUESTION}).get_json()
    assert PHONE in context["prompt"]
    assert PHONE_TURN < 150


TOKENIZER = load_tokenizer()


def segment(first: int, last: int, lines: int) -> Segment:
    made = Segment(id="", turn_range=[first, last], goal="查询订单物流", constraints=["不要推荐新品"],
                   decisions=[Decision(decision="超时设为45秒", reason="高峰期银行接口慢")],
                   done=[f"第{i}轮：订单 {10000 + i} 已登记工单 T{500000 + i}" for i in range(first, first + lines)],
                   facts=[f"订单 {10000 + i} 的金额是 {100 + i} 元" for i in range(first, first + lines)],
                   key_numbers={f"工单 {i}": f"T{700000 + i}" for i in range(lines)})
    return finish_segment(made, "zh", TOKENIZER)


def test_trim_keeps_what_is_in_force_and_the_newest_lines() -> None:
    big = segment(1, 200, 200)
    trimmed = trim_segment(big, 300, tokenizer=TOKENIZER, language="zh")
    assert trimmed.tokens <= 300 < big.tokens
    assert trimmed.goal == big.goal and trimmed.constraints == big.constraints
    assert trimmed.decisions == big.decisions
    assert trimmed.turn_range == big.turn_range
    # Newest first: what is kept of each list is its tail, in its order.
    assert trimmed.facts and trimmed.facts == big.facts[-len(trimmed.facts):]
    kept = list(trimmed.key_numbers.items())
    assert kept == (list(big.key_numbers.items())[-len(kept):] if kept else [])
    assert trimmed.done == (big.done[-len(trimmed.done):] if trimmed.done else [])
    assert trimmed.id != big.id and trimmed.id.startswith("seg-1-200-")


def long_chat_segment() -> Segment:
    """The oldest segment of the long chat near turn 1,100: a question and an amount a turn, the last turns' key
    numbers (quoted by those facts and by the done lines), the phone decision of turn 40."""
    rng = random.Random(7)
    facts: list[str] = []
    numbers: dict[str, str] = {}
    done: list[str] = []
    for turn in range(1001, 1101):
        order, amount = rng.randint(10000, 99999), rng.randint(100, 999)
        facts += [f"第{turn}轮：我的订单号 {order} 怎么样了？", f"上次说的金额是 {amount} 元"]
        if turn > 1096:
            suffix = f" {turn - 1097}" if turn > 1097 else ""
            ticket, day = f"T{rng.randint(100000, 999999)}", f"10月{rng.randint(1, 28)}日"
            numbers.update({f"number{suffix}": f"{turn}轮", f"订单号{suffix}": str(order),
                            f"金额{suffix}": f"{amount} 元", f"工单号{suffix}": ticket, f"截止日期{suffix}": day})
            done.append(f"已为您登记工单 {ticket}，预计 {day} 前处理完毕")
    made = Segment(id="", turn_range=[1, 1100], goal="",
                   decisions=[Decision(decision="第40轮：我的收货电话改成 13957614382，以后都寄到这个号码")],
                   done=done, facts=facts, key_numbers=numbers)
    return finish_segment(made, "zh", TOKENIZER)


def test_a_trim_never_empties_the_segment_when_its_estimate_overshoots() -> None:
    """Leaving a fact out can show the key numbers it quoted (and leave room for more of them), so the rendered cost
    is not monotonic in the trim's budget. Every allowance below the segment keeps it within a line of the
    allowance; the correction's fallback used to keep nothing but the header (12 tokens) for 22 of these."""
    big = long_chat_segment()
    for allowance in range(big.tokens - 400, big.tokens):
        trimmed = trim_segment(big, allowance, tokenizer=TOKENIZER, language="zh")
        assert allowance - 100 <= trimmed.tokens <= allowance, allowance
        assert trimmed.decisions == big.decisions


def test_a_trim_counts_each_line_once_whatever_budgets_it_tries() -> None:
    """A trim tries up to ~14 budgets over the same lines (an estimate, its corrections, a bisection): each line is
    counted once, not once a try, since the tokenizer's own cache is shared with every other session's lines."""
    big = long_chat_segment()
    tokenizer = CountingTokenizer()
    trimmed = trim_segment(big, big.tokens - 200, tokenizer=tokenizer, language="zh")
    assert trimmed == trim_segment(big, big.tokens - 200, tokenizer=TOKENIZER, language="zh")
    lines = {*big.facts, *big.done, *(f"{label}={value}" for label, value in big.key_numbers.items())}
    counted = [text for text in tokenizer.asked if text in lines]
    assert counted and len(counted) == len(set(counted))


def test_roll_up_touches_only_archived_turns_and_only_past_the_cap() -> None:
    old, new = segment(1, 200, 200), segment(201, 206, 3)
    assert roll_up([old, new], 10_000, 206, tokenizer=TOKENIZER, language="zh") == [old, new]
    # Turns 1–200 not archived yet (a stateless compact's only copy): nothing leaves.
    assert roll_up([old, new], 400, 150, tokenizer=TOKENIZER, language="zh") == [old, new]
    rolled = roll_up([old, new], 400, 206, tokenizer=TOKENIZER, language="zh")
    assert rolled[1] == new
    assert rolled[0].tokens <= max(MIN_OLDEST_TOKENS, 400 - new.tokens)


def test_a_trim_leaves_room_for_the_next_turns() -> None:
    """A trim leaves TRIM_SLACK of the cap free, out of what the verbatim turns hold (less TRIM_MARGIN): the next
    turn's segment fits without another trim (the oldest segment is cut, rendered and counted on one turn in several,
    not on every turn), and the trigger, which counts the verbatim turns with the state, is still reached."""
    old, new = segment(1, 200, 200), segment(201, 206, 3)
    slack = int(2000 * TRIM_SLACK)
    rolled = roll_up([old, new], 2000, 206, tokenizer=TOKENIZER, language="zh", verbatim=1000)
    assert sum(s.tokens for s in rolled) <= 2000 - slack < old.tokens + new.tokens
    following = segment(207, 207, 1)
    assert following.tokens < slack
    again = roll_up([*rolled, following], 2000, 207, tokenizer=TOKENIZER, language="zh", verbatim=1000)
    assert again == [*rolled, following] and again[0] is rolled[0]
    # Few tokens verbatim: the room comes out of them, so the state and the kept turns still reach the trigger.
    verbatim = TRIM_MARGIN + 50
    short = sum(s.tokens for s in roll_up([old, new], 2000, 206, tokenizer=TOKENIZER, language="zh",
                                          verbatim=verbatim))
    assert short <= 2000 - 50 and short + verbatim >= 2000


def test_newer_segments_over_the_cap_join_the_oldest_before_it_is_trimmed() -> None:
    old, middle, new = segment(1, 200, 200), segment(201, 250, 50), segment(251, 256, 3)
    rolled = roll_up([old, middle, new], 600, 256, tokenizer=TOKENIZER, language="zh")
    assert [s.turn_range for s in rolled] == [[1, 250], [251, 256]]
    assert sum(s.tokens for s in rolled) <= 600
    # The newest segment's turns are not archived: it stays as it is, and so does the rest.
    assert roll_up([old, middle, new], 600, 250, tokenizer=TOKENIZER, language="zh")[-1] == new


def test_a_stored_row_is_checked_once_and_again_when_it_changes() -> None:
    """common.stored.memory_problem remembers its answer for the object it read, and only while the fields it
    checked are the same: a copy with another version, meta or stamp is checked again."""
    from acn.common.models import Memory
    from acn.common.stored import memory_problem

    now = 1_764_900_000_000
    row = Memory(id="m1", kind="fact", content="订单 12345", importance=5, scope="session", agent_id="a",
                 session_id="s", created_at=now, updated_at=now, version=1, meta={"turn": 1})
    assert memory_problem(row) is None and memory_problem(row) is None
    assert memory_problem(row.model_copy(update={"version": 0})) == "version must be between 1 and 2147483647"
    assert memory_problem(row.model_copy(update={"meta": {"x": float("inf")}})) == "meta number is not finite"
    row.updated_at = 2**62
    assert memory_problem(row) == "updated_at must be a UTC epoch-millisecond time within 100 years of now"


def test_segment_relevance_is_the_share_of_the_querys_bigrams_in_the_text() -> None:
    """relevance looks the query's bigrams up in the folded text instead of building the text's bigram set (a
    segment's text changes every turn): the same number as the sets' for any text, one-character ones included."""
    from acn.assembly.layers import relevance
    from acn.text.similarity import shingles

    rng = random.Random(11)
    alphabet = "订单号金额元退款电话ABab12 ，。!？-_"
    for _ in range(2000):
        query = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        wanted = shingles(query)
        expected = len(wanted & shingles(text)) / len(wanted) if wanted else 0.0
        assert relevance(query, text) == expected, (query, text)
