"""A Filter evaluated in Python against a stored row, for what this process serves from memory.

The in-process index (acn/storage/database/lite/local_index.py) must select exactly the rows the store would. It
evaluates the
same Filter the store gets, so the two paths cannot drift apart. The grammar is the part of Milvus's boolean
expressions the repositories write: comparisons of a field with a literal or a {placeholder} (== != < <= > >=),
`in` / `not in` a list, `and`, `or`, `not` and parentheses. Anything else raises UnsupportedFilter and the
caller asks the store instead.
"""

from __future__ import annotations

import json
import operator
import re
from collections.abc import Callable
from functools import lru_cache
from operator import itemgetter
from typing import Any, cast

from acn.storage.database.base import Filter, Record

Predicate = Callable[[Record], bool]
# A compiled template: given the filter's parameters, the predicate over a row.
Compiled = Callable[[dict[str, Any]], Predicate]

_TOKEN = re.compile(r"""\s*(?:
    (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<placeholder>\{[A-Za-z_][A-Za-z0-9_]*\})
  | (?P<op>==|!=|<=|>=|<|>|\(|\)|\[|\]|,)
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
)""", re.VERBOSE)
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq, "!=": operator.ne, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
}
_KEYWORDS = {"and", "or", "not", "in", "true", "false"}


class UnsupportedFilter(ValueError):
    """The filter uses syntax this evaluator does not know: ask the store."""


def predicate(where: Filter) -> Predicate:
    """Return a function telling whether a row matches the filter (an empty filter matches every row)."""
    return _compile(where.template)(where.params)


def tuple_predicate(where: Filter, positions: tuple[str, ...]) -> Callable[[tuple[Any, ...]], bool]:
    """Return `predicate(where)` over rows held as tuples of these fields, in this order (a field absent from
    `positions` reads as None, as a field absent from a dict row does). Indexing a tuple is ~3x faster than a
    mapping's `get` per field read: the in-process index tests every row it holds against each new filter."""
    return cast(Callable[[tuple[Any, ...]], bool], _compile(where.template, positions)(where.params))


def read_fields(where: Filter) -> tuple[str, ...]:
    """Return the fields the filter reads, each once, in the order it names them (its answer for a row depends on
    these alone)."""
    return _fields(where.template)


@lru_cache(maxsize=512)
def _fields(template: str) -> tuple[str, ...]:
    tokens = _tokens(template)
    parser = _Parser(tokens, {})
    if tokens:
        parser.expression()
    return tuple(dict.fromkeys(parser.fields))


def listed_ids(where: Filter) -> list[Any] | None:
    """Return the ids an `id in {name}` conjunct of the filter lists, when it has one at its top level (every row that
    matches has one of those ids), else None."""
    name = _listed_name(where.template)
    values = where.params.get(name) if name is not None else None
    return list(values) if isinstance(values, list | tuple) else None


@lru_cache(maxsize=512)
def _listed_name(template: str) -> str | None:
    try:
        return _conjunct_name(_tokens(template))
    except UnsupportedFilter:
        return None


def _conjunct_name(tokens: list[tuple[str, str]]) -> str | None:
    """Return the placeholder of an `id in {name}` among the and-ed parts of these tokens (parentheses that wrap a
    whole part are looked through; a part joined by `or` is not required: None)."""
    while len(tokens) > 2 and tokens[0][1] == "(" and _closing(tokens) == len(tokens) - 1:
        tokens = tokens[1:-1]
    if len(tokens) == 3 and [text for _, text in tokens[:2]] == ["id", "in"] and tokens[2][0] == "placeholder":
        return tokens[2][1][1:-1]
    parts, depth, start = [], 0, 0
    for at, (kind, text) in enumerate(tokens):
        depth += (kind, text) == ("op", "(")
        depth -= (kind, text) == ("op", ")")
        if depth == 0 and kind == "word" and text in ("and", "or"):
            if text == "or":
                return None
            parts.append(tokens[start:at])
            start = at + 1
    if not parts:
        return None
    return next((name for part in [*parts, tokens[start:]] if (name := _conjunct_name(part)) is not None), None)


def _closing(tokens: list[tuple[str, str]]) -> int:
    """Return where the parenthesis that opens the tokens closes (-1: it does not)."""
    depth = 0
    for at, (kind, text) in enumerate(tokens):
        depth += (kind, text) == ("op", "(")
        depth -= (kind, text) == ("op", ")")
        if depth == 0:
            return at
    return -1


def supported(where: Filter) -> bool:
    """Return True when the filter's syntax is within the grammar (so `predicate` will not refuse it)."""
    try:
        _compile(where.template)
    except UnsupportedFilter:
        return False
    return True


@lru_cache(maxsize=512)
def _compile(template: str, positions: tuple[str, ...] | None = None) -> Compiled:
    tokens = _tokens(template)
    if not tokens:
        return lambda params: lambda row: True
    parser = _Parser(tokens, {field: at for at, field in enumerate(positions)} if positions is not None else None)
    compiled = parser.expression()
    if parser.position != len(tokens):
        raise UnsupportedFilter(f"unexpected {tokens[parser.position][1]!r} in filter")
    return compiled


def filter_tokens(template: str) -> list[tuple[str, str]]:
    """Return the filter's tokens as (kind, text): string, number, placeholder, op or word."""
    return _tokens(template)


def _tokens(template: str) -> list[tuple[str, str]]:
    tokens, position, end = [], 0, len(template.rstrip())
    while position < end:
        match = _TOKEN.match(template, position)
        if not match or match.end() == position:
            raise UnsupportedFilter(f"cannot read filter at {template[position:position + 20]!r}")
        kind = match.lastgroup or ""
        tokens.append((kind, match.group(kind)))
        position = match.end()
    return tokens


class _Parser:
    """Recursive descent over the tokens; every rule returns a Compiled."""

    def __init__(self, tokens: list[tuple[str, str]], positions: dict[str, int] | None = None) -> None:
        self.tokens = tokens
        self.position = 0
        self.positions = positions  # rows are tuples: a field is read at its position (None: rows are dicts)
        self.fields: list[str] = []  # every field a comparison reads, as parsed

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.position] if self.position < len(self.tokens) else ("end", "")

    def take(self, text: str | None = None) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "end" or (text is not None and token[1] != text):
            raise UnsupportedFilter(f"expected {text or 'more'} in filter, found {token[1]!r}")
        self.position += 1
        return token

    def expression(self) -> Compiled:
        parts = [self.conjunction()]
        while self.peek() == ("word", "or"):
            self.take()
            parts.append(self.conjunction())
        if len(parts) == 1:
            return parts[0]
        return lambda params: _any([part(params) for part in parts])

    def conjunction(self) -> Compiled:
        parts = [self.negation()]
        while self.peek() == ("word", "and"):
            self.take()
            parts.append(self.negation())
        if len(parts) == 1:
            return parts[0]
        return lambda params: _all([part(params) for part in parts])

    def negation(self) -> Compiled:
        if self.peek() == ("word", "not"):
            self.take()
            inner = self.negation()
            return lambda params: _not(inner(params))
        if self.peek() == ("op", "("):
            self.take()
            inner = self.expression()
            self.take(")")
            return inner
        return self.comparison()

    def comparison(self) -> Compiled:
        kind, field = self.take()
        if kind != "word" or field in _KEYWORDS:
            raise UnsupportedFilter(f"expected a field name in filter, found {field!r}")
        self.fields.append(field)
        read = _reader(field, self.positions)
        kind, text = self.take()
        if kind == "word" and text == "not":
            self.take("in")
            value = self.value()
            return lambda params: _member(read, value(params), negated=True)
        if kind == "word" and text == "in":
            value = self.value()
            return lambda params: _member(read, value(params), negated=False)
        compare = _COMPARE.get(text) if kind == "op" else None
        if compare is None:
            raise UnsupportedFilter(f"unsupported operator {text!r} in filter")
        value = self.value()
        return lambda params: _compare(read, compare, value(params))

    def value(self) -> Callable[[dict[str, Any]], Any]:
        kind, text = self.take()
        if kind == "placeholder":
            name = text[1:-1]
            return lambda params: params[name]
        if kind == "op" and text == "[":
            items = []
            while self.peek() != ("op", "]"):
                items.append(self.value())
                if self.peek() == ("op", ","):
                    self.take()
            self.take("]")
            return lambda params: [item(params) for item in items]
        constant = _literal(kind, text)
        return lambda params: constant


def _literal(kind: str, text: str) -> Any:
    if kind == "string":
        return json.loads(text)
    if kind == "number":
        return float(text) if "." in text else int(text)
    if kind == "word" and text in ("true", "false"):
        return text == "true"
    raise UnsupportedFilter(f"expected a value in filter, found {text!r}")


def _reader(field: str, positions: dict[str, int] | None) -> Callable[[Any], Any]:
    """Return how a row's field is read: `row.get(field)` of a dict, `row[at]` of a tuple (None if not held)."""
    if positions is None:
        return lambda row: row.get(field)
    at = positions.get(field)
    if at is None:
        return lambda row: None
    return itemgetter(at)


def _compare(read: Callable[[Any], Any], compare: Callable[[Any, Any], bool], value: Any) -> Predicate:
    return lambda row: compare(read(row), value)


def _member(read: Callable[[Any], Any], values: Any, *, negated: bool) -> Predicate:
    if not isinstance(values, list | tuple | set | frozenset):
        raise UnsupportedFilter(f"`in` needs a list, got {type(values).__name__}")
    allowed = frozenset(values)
    if negated:
        return lambda row: read(row) not in allowed
    return lambda row: read(row) in allowed


def _all(parts: list[Predicate]) -> Predicate:
    return lambda row: all(part(row) for part in parts)


def _any(parts: list[Predicate]) -> Predicate:
    return lambda row: any(part(row) for part in parts)


def _not(part: Predicate) -> Predicate:
    return lambda row: not part(row)
