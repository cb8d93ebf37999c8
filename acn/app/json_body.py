"""The one JSON request-body parser: every route that takes a body (nodes, the Dify extension) reads it here.

It refuses what Python's json module would let through: a body that is not declared JSON, invalid UTF-8, absurd
nesting (json recurses per level), NaN/Infinity, lone surrogate escapes and duplicate keys.
"""

from __future__ import annotations

import json
import re
from typing import Any

from flask import request

from acn.common.errors import BadRequestError, DuplicateKeyError, UnsupportedMediaError

# Deeper bodies are refused (400): Python's json recurses per level, and nothing this pack takes nests so deep.
MAX_JSON_DEPTH = 64
_CONTAINERS = frozenset({dict, list})
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def is_json_mimetype(mimetype: str) -> bool:
    """True for application/json and application/*+json (both need a CORS preflight from a browser)."""
    mimetype = mimetype.lower()
    return mimetype == "application/json" or (mimetype.startswith("application/") and mimetype.endswith("+json"))


def read_json_body() -> dict[str, Any]:
    """Return the request body as a JSON object, or raise a 400/415/422 error.

    The content type is required even for an empty body: a browser page can send text/plain, a form or a Blob
    without a type to any origin without asking first (no-cors fetch, sendBeacon), never application/json.
    """
    if not is_json_mimetype(request.mimetype or ""):
        shown = request.mimetype or "none"
        raise UnsupportedMediaError(f"content type must be application/json, not {shown}")
    raw = request.get_data(cache=True)
    if not raw.strip():
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequestError(f"body is not valid UTF-8 (byte {error.start})") from None
    return parse_json_object(text)


def parse_json_object(text: str) -> dict[str, Any]:
    """Parse text that must hold one JSON object (see the module docstring for what is refused)."""
    try:
        body = json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_keys)
    except RecursionError:
        raise BadRequestError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as error:  # JSONDecodeError is a ValueError
        raise BadRequestError(f"malformed JSON: {error}") from None
    if not isinstance(body, dict):
        raise BadRequestError("the body must be a JSON object")
    if _deeper_than(body, MAX_JSON_DEPTH):
        raise BadRequestError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if _SURROGATE_ESCAPE.search(text):
        _reject_lone_surrogates(body)
    return body


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys; another parser (a proxy, a WAF, the caller's logs) may keep the first,
    # so the body would mean different things to different readers. Refuse it (422, like any invalid field).
    body = dict(pairs)
    if len(body) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(f"duplicate key {key[:64]!r} in a JSON object")
            seen.add(key)
    return body


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not, and neither does the store.
    raise ValueError(f"{name} is not valid JSON")


def _reject_lone_surrogates(body: dict[str, Any]) -> None:
    # JSON may escape half of a UTF-16 pair ("\ud800"); such a string cannot be stored or re-encoded.
    try:
        json.dumps(body, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BadRequestError("the body contains an unpaired UTF-16 surrogate escape") from None


def _deeper_than(value: Any, limit: int) -> bool:
    # Walk the parsed containers (not the text's characters): linear in the number of objects and lists, and it
    # stops at the first one below the limit. json.loads itself stops at the interpreter's recursion limit
    # (RecursionError, caught as malformed), so anything deeper than that never gets here.
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > limit:
            return True
        children = node.values() if isinstance(node, dict) else node
        if _CONTAINERS.isdisjoint(map(type, children)):  # in C: a long list of scalars costs no Python loop
            continue
        stack.extend((child, depth + 1) for child in children if type(child) in _CONTAINERS)
    return False
