"""The process a server runs in, prepared around the app: the door to storage's process room for the front door.

Importing this module chooses Arrow's memory pool (acn/storage/process/allocator.py): Arrow reads its setting once,
when pyarrow is imported, and pymilvus imports pyarrow as it is imported itself, so acn/server.py imports this module
before anything of ours that imports pymilvus.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from acn.common.settings import Settings
from acn.storage.process import Foreground, limit_malloc_arenas


def prepare_process(settings: Settings) -> None:
    """Cap malloc's arenas; call before Runtime.open starts Lite's threads and the server its request threads
    (arenas are made per thread)."""
    limit_malloc_arenas(settings.malloc_arenas)


def requests_first(app: Callable[..., Iterable[bytes]]) -> Foreground:
    """Return the app with its handling of each request marked foreground work: background reads of the embedded
    Lite (a session index loading) wait for it (acn/storage/database/lite/read_priority.py)."""
    return Foreground(app)
