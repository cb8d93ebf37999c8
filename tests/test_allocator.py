"""The process's allocators under the embedded Lite (issue 21: memory held per agent).

Arrow's pool is malloc in a server process (mimalloc kept what Lite freed: +168 MB vs +79 MB after 3,000 agents),
and the flusher hands malloc's free pages back after a background flush.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from acn.storage.database.base import CollectionSpec
from acn.storage.database.milvus import MilvusStore
from acn.storage.process.allocator import trim_free_memory
from tests.conftest import ROOT, server_env

SPEC = CollectionSpec(name="trim", scalar_fields={"kind": "varchar"}, text_field="content")


def _run(code: str, **env: str) -> str:
    environment = server_env(**env)
    environment.pop("ARROW_DEFAULT_MEMORY_POOL", None)
    environment.update(env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, env=environment,
                          capture_output=True, text=True, timeout=120, check=True)
    return done.stdout.strip()


def test_the_server_module_gives_arrow_the_system_pool_unless_the_operator_chose_one() -> None:
    code = """
        import server, pyarrow
        print(pyarrow.default_memory_pool().backend_name)
    """
    assert _run(code) == "system"
    assert _run(code, ARROW_DEFAULT_MEMORY_POOL="mimalloc") == "mimalloc"


def _glibc() -> bool:
    import ctypes

    try:
        return hasattr(ctypes.CDLL("libc.so.6"), "gnu_get_libc_version")
    except OSError:
        return False


@pytest.mark.skipif(not _glibc(), reason="malloc_trim is glibc's")
def test_trim_hands_free_malloc_pages_back() -> None:
    # 64 MB in 4 KB blocks, freed under a live block that keeps malloc from shrinking the heap by itself.
    code = """
        from pathlib import Path
        from acn.storage.process.allocator import trim_free_memory

        def anon():
            line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("RssAnon"))
            return int(line.split()[1]) / 1024

        blocks = [bytearray(4096) for _ in range(16_384)]
        pin = bytearray(4096)
        del blocks
        before = anon()
        trimmed = trim_free_memory()
        print(trimmed, round(before - anon()))
    """
    trimmed, returned = _run(code).split()
    assert trimmed == "True"
    assert int(returned) >= 16  # of the 64 MB freed; not an exact figure


def test_the_flusher_trims_after_a_background_flush_and_not_when_told_not_to(tmp_path: Path) -> None:
    calls: list[float] = []

    def trim() -> bool:
        calls.append(time.monotonic())
        return trim_free_memory()

    for trim_after_flush, expected in ((True, True), (False, False)):
        calls.clear()
        store = MilvusStore(str(tmp_path / f"memory-{trim_after_flush}.db"), flush_every=10_000, flush_interval=60.0,
                            trim_after_flush=trim_after_flush, trim=trim).open()
        try:
            store.ensure(SPEC)
            store.insert(SPEC.name, [{"id": f"r{i}", "kind": "fact", "content": f"row {i}"} for i in range(50)])
            deadline = time.monotonic() + 10.0
            while (store.flushes.unflushed or (expected and not calls)) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert store.flushes.unflushed == 0  # flushed in the pause after the write
            time.sleep(0.3)  # a trim comes right after its flush, on the flusher thread
            assert bool(calls) is expected and store.flushes.trims == len(calls)
            if expected:
                # And again while Lite compacts on its own worker after the flush, with no write since.
                deadline = time.monotonic() + 10.0
                while len(calls) < 2 and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert len(calls) >= 2 and calls[1] - calls[0] >= 1.5
        finally:
            store.close()


@pytest.mark.skipif(not _glibc(), reason="the arena count is glibc's")
def test_the_app_caps_malloc_arenas_before_its_threads_start(tmp_path: Path) -> None:
    # Each thread gets an arena of its own up to glibc's limit (8 per core), and a freed block is reused only in its
    # own arena. After create_app, Lite's threads and six more that allocate share ACN_MALLOC_ARENAS arenas.
    code = f"""
        import ctypes, os, threading
        from pathlib import Path
        from tests.conftest import make_settings
        from acn.server import create_app

        app = create_app(make_settings(Path({str(tmp_path)!r}), malloc_arenas=2))
        kept = []
        threads = [threading.Thread(target=lambda: kept.append([bytearray(100_000) for _ in range(5)]))
                   for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        libc = ctypes.CDLL("libc.so.6")
        libc.fopen.restype = ctypes.c_void_p
        libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
        libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.fclose.argtypes = [ctypes.c_void_p]
        report = Path({str(tmp_path / "malloc.xml")!r})
        file = libc.fopen(str(report).encode(), b"w")
        libc.malloc_info(0, file)
        libc.fclose(file)
        print(report.read_text().count("<heap nr="))
        app.extensions["acn"].close()
        os._exit(0)
    """
    assert int(_run(code)) <= 2
