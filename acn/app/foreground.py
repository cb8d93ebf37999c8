"""Each request the server handles counts as foreground work: background store reads wait for it to end."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from acn.storage.read_priority import READS


class Foreground:
    """WSGI wrapper: the app's handling of a request (not the sending of its body) is foreground work.

    Why: a session index loading in the background makes Milvus Lite (running in this process) build thousands of
    rows under the interpreter lock; alongside a request that slows the request down, from its store search to its
    ranking and rendering (acn/storage/read_priority.py).
    """

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with READS.foreground():
            return self._app(environ, start_response)
