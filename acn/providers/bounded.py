"""What every provider answer is held to before any code uses it: a total deadline, a byte cap, a JSON shape cap,
numbers that fit, and threads of its own.

The endpoints are the operator's (embeddings, rerank, LLM) but what they answer is still data: a server that
sends its headers and then one byte every half second kept a request for 34 s against a 10 s timeout (a read
timeout bounds one socket read, not the body); 50,000 nested brackets raised RecursionError in json.loads; a
400-digit number raised OverflowError in float(). Each became a 500. Here:

- `read_body` reads whatever bytes the socket has (read1), setting the socket's timeout to what is left of the
  call's deadline before every read, so the whole body ends by the deadline however slowly it drips;
- `decode_json` refuses nesting deeper than MAX_JSON_DEPTH before parsing (the C parser recurses per level) and
  numbers longer than MAX_NUMBER_CHARS, non-finite or NaN, as malformed (ProviderError);
- `CallPool` runs the call on a bounded pool of its own threads and the request waits at most until the
  deadline: a call stuck in a server that drips its headers holds one of those threads, never a request thread;
  past the pool's size a call is refused at once;
- `Backoff` keeps a failing endpoint from being asked again for a few seconds: requests go on without it at once.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

import requests

from acn.common.errors import PackError, ProviderError, ProviderTimeoutError

T = TypeVar("T")
# Embedding and rerank answers are 4 levels deep, a chat completion 5 and the compaction JSON in it 4.
MAX_JSON_DEPTH = 32
# A float64 needs at most 17 significant digits and an exponent: 40 characters leave room for any spelling of
# one ("-0.00000000012345678901234567e-300"); an integer longer than int64's 20 characters is no count or index.
MAX_NUMBER_CHARS = 40
MAX_INT_CHARS = 20
READ_CHUNK = 65536
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_INNERMOST = re.compile(r"\[\]|\{\}")


class Malformed(ValueError):
    """A JSON number or shape outside the caps (raised inside json.loads, reported as a ProviderError)."""


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the text nests brackets deeper than limit (or leaves some unclosed), found without recursion:
    strings out, then the innermost pairs removed once per level, each pass a C-speed regex."""
    skeleton = _NOT_BRACKET.sub("", _STRING.sub("", text))
    for _ in range(limit):
        if not skeleton:
            return False
        reduced = _INNERMOST.sub("", skeleton)
        if reduced == skeleton:
            return True  # unbalanced: the parser would recurse into it all the same
        skeleton = reduced
    return bool(skeleton)


def _integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_CHARS:
        raise Malformed(f"an integer of {len(text)} characters")
    return int(text)


def _float(text: str) -> float:
    if len(text) > MAX_NUMBER_CHARS:
        raise Malformed(f"a number of {len(text)} characters")
    value = float(text)
    if not math.isfinite(value):
        raise Malformed("a number too large for a float")
    return value


def _constant(text: str) -> Any:
    raise Malformed(f"{text} is not a number")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys, another reader the first: the object would mean two things.
    value = dict(pairs)
    if len(value) != len(pairs):
        raise Malformed("a key twice in one object")  # not which: the key is the answer's text, never reflected
    return value


def loads(text: str | bytes, *, unique_keys: bool = False) -> Any:
    """json.loads with the caps above (and, when asked, no key twice in one object); Malformed (a ValueError) or
    ValueError when refused."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if json_too_deep(text):
        raise Malformed(f"nested deeper than {MAX_JSON_DEPTH} levels")
    return json.loads(text, parse_int=_integer, parse_float=_float, parse_constant=_constant,
                      object_pairs_hook=_unique_keys if unique_keys else None)


def decode_json(raw: bytes, what: str) -> Any:
    """Return the parsed answer; ProviderError when it is not JSON or is outside the caps."""
    try:
        return loads(raw)
    except Malformed as error:
        raise ProviderError(f"{what} returned malformed JSON ({error})") from None
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ProviderError(f"{what} returned a body that is not JSON") from error


def read_body(response: requests.Response, deadline: float, what: str, limit: int) -> bytes:
    """Read the body as it arrives until the deadline (monotonic) and at most `limit` bytes."""
    chunks: list[bytes] = []
    size = 0
    raw = response.raw
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise requests.Timeout("reading the response body took too long")
        _socket_timeout(raw, remaining)
        # decode_content: a gzip answer is unpacked here (requests leaves that to its own iterator), at most
        # READ_CHUNK bytes a read, so the cap bounds what is unpacked too.
        chunk = raw.read1(READ_CHUNK, decode_content=True)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise ProviderError(f"{what} answered more than {limit} bytes")


def _socket_timeout(raw: Any, seconds: float) -> None:
    """Bound the next socket read by what is left of the deadline (a read timeout alone bounds each read)."""
    sock = getattr(getattr(raw, "connection", None), "sock", None)
    if sock is not None:
        try:
            sock.settimeout(max(0.001, seconds))
        except OSError:
            pass  # closed meanwhile: the read reports it


class CallPool:
    """At most `size` calls at once on threads of their own; the caller waits until its deadline at most."""

    def __init__(self, size: int, name: str) -> None:
        self.size = size
        self._slots = threading.BoundedSemaphore(size)
        self._executor = ThreadPoolExecutor(max_workers=size, thread_name_prefix=name)

    def run(self, call: Callable[[], T], deadline: float, what: str) -> T:
        """Return call()'s result; ProviderTimeoutError past the deadline, ProviderError when every thread is busy."""
        if not self._slots.acquire(blocking=False):
            raise ProviderError(f"{what}: all {self.size} call threads are busy")
        try:
            future: Future[T] = self._executor.submit(call)
        except RuntimeError as error:  # shut down
            self._slots.release()
            raise ProviderError(f"{what}: closed") from error
        future.add_done_callback(lambda _: self._slots.release())
        try:
            return future.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise ProviderTimeoutError(f"{what} did not answer by its deadline") from None

    def close(self) -> None:
        """Stop taking calls; running ones end by their own deadline."""
        self._executor.shutdown(wait=False, cancel_futures=True)


class Backoff:
    """After a failure, refuse calls for `seconds` (a down endpoint answers every request at once, not by timeout)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._until = 0.0
        self._lock = threading.Lock()

    def check(self, what: str) -> None:
        """Raise ProviderError while backing off."""
        with self._lock:
            left = self._until - time.monotonic()
        if left > 0:
            raise ProviderError(f"{what} failed moments ago; not asked again for {left:.1f}s")

    def failed(self) -> None:
        with self._lock:
            self._until = time.monotonic() + self.seconds

    def guarded(self, call: Callable[[], T], what: str) -> T:
        """Run call() unless backing off; a PackError from it starts the back-off."""
        self.check(what)
        try:
            return call()
        except PackError:
            self.failed()
            raise
