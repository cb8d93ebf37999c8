"""Progress bars for long benchmark loops: tqdm when installed (the `bench` extra), plain lines otherwise."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")


def progress(items: Iterable[T], *, total: int | None = None, desc: str = "") -> Iterator[T]:
    """Yield items while showing progress on stderr."""
    try:
        from tqdm import tqdm
    except ImportError:
        yield from _plain(items, total=total, desc=desc)
        return
    yield from tqdm(items, total=total, desc=desc, file=sys.stderr, mininterval=1.0, dynamic_ncols=True)


def _plain(items: Iterable[T], *, total: int | None, desc: str) -> Iterator[T]:
    started = last = time.monotonic()
    count = 0
    for item in items:
        yield item
        count += 1
        now = time.monotonic()
        if now - last >= 10:
            last = now
            of = f"/{total}" if total else ""
            print(f"{desc}: {count}{of} ({now - started:.0f}s)", file=sys.stderr, flush=True)
    print(f"{desc}: {count} done in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
