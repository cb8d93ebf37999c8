"""The default offline engine: rule-based, sentence-level extraction of a segment's working state."""

from __future__ import annotations

from acn.common.conversation import Turn
from acn.common.models import Decision, Segment
from acn.compaction.key_numbers import build_key_numbers, mark_earlier
from acn.compaction.merge import resolve_decisions
from acn.compaction.rules import (
    CONSTRAINT,
    DECISION,
    DONE,
    FACT,
    GOAL,
    REQUEST,
    TODO,
    Statement,
    changes_goal,
    classify,
    clean_sentence,
    is_question,
    split_reason,
)
from acn.compaction.segment_lines import segment_body
from acn.compaction.segments import user_sentences
from acn.compaction.state import WorkingState, carry_constraints
from acn.compaction.statements import dedupe_keep_latest, numbers_of, same_topic
from acn.text.numbers import KeyNumber, extract_key_numbers
from acn.text.pleasantries import is_pleasantry
from acn.text.sentences import split_sentences
from acn.text.similarity import similarity

# Statements without a key number are the lossy part of a summary; a pasted document must not turn
# into dozens of facts. Facts with numbers are never capped.
MAX_PLAIN_FACTS = 8
ECHO_SIMILARITY = 0.45
# An assistant sentence repeating the user's numbers needs less wording overlap to count as an echo.
ECHO_SIMILARITY_SAME_NUMBERS = 0.25
SUPERSEDABLE = (DECISION, DONE, FACT)


def summarize_extractive(turns: list[Turn], state: WorkingState, language: str) -> Segment:
    """Return the segment (without id, text and tokens) the rules extract from turns."""
    statements = collect_statements(turns, goal_open=not state.goal)
    statements = resolve_requests(drop_echoes(statements))
    statements, superseded = drop_superseded(statements)
    goal = next((item.text for item in statements if item.kind == GOAL), "") or state.goal
    new_constraints = dedupe_keep_latest(_texts(statements, CONSTRAINT))
    segment = Segment(
        id="",
        turn_range=[turns[0].number, turns[-1].number] if turns else [0, 0],
        goal=goal,
        constraints=carry_constraints(state.constraints, new_constraints, user_sentences(turns)),
        done=dedupe_keep_latest(_texts(statements, DONE)),
        todo=dedupe_keep_latest(_texts(statements, TODO)),
        decisions=resolve_decisions([_decision(item) for item in statements if item.kind == DECISION])[0],
        facts=cap_plain_facts(dedupe_keep_latest(_texts(statements, FACT))),
    )
    pairs = [(number.label, number.value) for number in source_numbers(turns)]
    pairs = mark_earlier(pairs, superseded, [segment_body(segment)], language)
    return segment.model_copy(update={"key_numbers": build_key_numbers(pairs)})


def cap_plain_facts(facts: list[str]) -> list[str]:
    """Keep every fact with a number and only the latest MAX_PLAIN_FACTS without one."""
    plain = [fact for fact in facts if not numbers_of(fact)]
    dropped = set(plain[: max(0, len(plain) - MAX_PLAIN_FACTS)])
    return [fact for fact in facts if fact not in dropped]


def source_text(turns: list[Turn]) -> str:
    """Return the text of every message of the turns."""
    return "\n".join(turn.text for turn in turns)


def source_numbers(turns: list[Turn]) -> list[KeyNumber]:
    """Return the key numbers of the turns, in order, deduplicated by value."""
    return extract_key_numbers(source_text(turns))


def collect_statements(turns: list[Turn], *, goal_open: bool) -> list[Statement]:
    """Split every message into sentences and classify them; pleasantries are dropped."""
    statements: list[Statement] = []
    for turn in turns:
        for message in turn.messages:
            if message.role == "tool":
                continue  # raw tool output: its numbers reach key_numbers, its conclusion is the reply
            role = "user" if message.role == "user" else "assistant"
            for sentence in split_sentences(message.content):
                text = clean_sentence(sentence)
                if not text or is_pleasantry(text):
                    continue
                open_now = goal_open or (role == "user" and changes_goal(text))
                kind = classify(text, role, goal_open=open_now, has_numbers=bool(extract_key_numbers(text)))
                if kind is None:
                    continue
                goal_open = goal_open and kind != GOAL
                statements.append(Statement(kind, text, role, turn.number, len(statements)))
    return statements


def drop_echoes(statements: list[Statement]) -> list[Statement]:
    """Drop assistant sentences that only repeat what the user said in the same turn."""
    users = _UserStatements(statements)
    return [item for item in statements if not (item.role != "user" and users.echoed(item))]


class _UserStatements:
    """The user's non-question statements by turn and by number, read once (a long turn has hundreds)."""

    def __init__(self, statements: list[Statement]) -> None:
        self.by_turn: dict[int, list[tuple[str, frozenset[str]]]] = {}
        self.by_number: dict[tuple[int, str], list[tuple[str, frozenset[str]]]] = {}
        for other in statements:
            if other.role != "user" or is_question(other.text):
                continue
            entry = (other.text, frozenset(numbers_of(other.text)))
            self.by_turn.setdefault(other.turn, []).append(entry)
            for number in entry[1]:
                self.by_number.setdefault((other.turn, number), []).append(entry)

    def echoed(self, item: Statement) -> bool:
        own_numbers = set(numbers_of(item.text))
        # A candidate must state every number of the reply (else the reply adds one of its own): any one of them
        # narrows the search to the statements that state it.
        candidates = (min((self.by_number.get((item.turn, number), []) for number in own_numbers), key=len)
                      if own_numbers else self.by_turn.get(item.turn, []))
        threshold = ECHO_SIMILARITY_SAME_NUMBERS if own_numbers else ECHO_SIMILARITY
        for text, numbers in candidates:
            if not own_numbers <= numbers:
                continue
            if similarity(item.text, text) >= threshold or same_topic(item.text, text):
                return True
        return False


def resolve_requests(statements: list[Statement]) -> list[Statement]:
    """Turn requests into to-dos, unless a later sentence of the same turn reports or answers them."""
    result: list[Statement] = []
    for item in statements:
        if item.kind == REQUEST:
            answered = any(
                other.turn == item.turn
                and other.order > item.order
                and other.role != "user"
                and other.kind in (DONE, FACT)
                for other in statements
            )
            if answered:
                continue
            item = Statement(TODO, item.text, item.role, item.turn, item.order)
        result.append(item)
    return result


def drop_superseded(statements: list[Statement]) -> tuple[list[Statement], list[str]]:
    """Drop earlier decisions, results and facts that a later decision on the same topic replaces."""
    kept: list[Statement] = []
    superseded: list[str] = []
    for item in statements:
        if item.kind in SUPERSEDABLE and _is_replaced(item, statements):
            superseded.append(item.text)
        else:
            kept.append(item)
    return kept, superseded


def _is_replaced(item: Statement, statements: list[Statement]) -> bool:
    return any(
        later.kind == DECISION
        and later.order > item.order
        and same_topic(later.text, item.text)
        and numbers_of(later.text) != numbers_of(item.text)
        for later in statements
    )


def _decision(item: Statement) -> Decision:
    decision, reason = split_reason(item.text)
    return Decision(decision=decision, reason=reason)


def _texts(statements: list[Statement], kind: str) -> list[str]:
    return [item.text for item in statements if item.kind == kind]
