"""Requests first: the WSGI wrapper that marks the app's handling of each request as foreground work.

Why: a session index loading in the background makes Milvus Lite (running in this process) build thousands of rows
under the interpreter lock; alongside a request that slows the request down
(acn/storage/database/lite/read_priority.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from acn.storage.database import READS


class Foreground:
    """WSGI wrapper: the app's handling of a request (not the sending of its body) is foreground work (READS)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self._app = app

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with READS.foreground():
            return self._app(environ, start_response)
