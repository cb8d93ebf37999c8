"""The long-lived parts of a running pack: store, repositories, tokenizer, providers."""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import cast

from acn.app.warmer import Warmer
from acn.assembly.warm import texts_budget, warm_reads, warm_texts
from acn.common.settings import Settings
from acn.providers.embedders import Embedder
from acn.providers.embedding_setup import embedder_from_settings, embeds_in_background, inline_rows
from acn.providers.llm_guard import LlmGate, parse_allow_list
from acn.providers.openai_chat import ChatClient
from acn.providers.rerank import Reranker
from acn.services.deps import Deps
from acn.services.slots import WorkSlots
from acn.storage.database import (
    MilvusStore,
    RefusedStore,
    RowSealer,
    SnapshotCipher,
    check_encryption,
    dense_kernel,
    open_store,
    read_fact,
    share_segmentation,
    store_secret,
    warm_insert_checks,
    write_fact,
)
from acn.storage.process import EmbeddingBacklog, trim_free_memory
from acn.storage.repositories import (
    MemoryRepository,
    SessionRepository,
    carry_over,
    open_coordinator,
    scope_legacy_ids,
)
from acn.text.byte_cache import TEXT_CACHE
from acn.text.model_cache import cache_dir_setting, load_jieba_dictionary
from acn.text.tokens import Tokenizer, load_tokenizer

log = logging.getLogger("acn.runtime")
# How long start-up waits at most for its warm-ups (jieba's dictionary, the embedder's
# model) before it serves: a warm-up that hangs must not keep the server from starting.
WARM_WAIT_SECONDS = 120.0


def _load_jieba(cache: Path | None, lite: bool) -> None:
    jieba = import_jieba()
    jieba.setLogLevel(logging.WARNING)  # its start-up chatter goes to stderr otherwise
    load_jieba_dictionary(jieba.dt, cache)
    if lite:  # after the dictionary: share_segmentation segments its samples both ways
        share_segmentation()


def import_jieba() -> ModuleType:
    """Import jieba without pkg_resources, which it would import only to open its own data files.

    pkg_resources scans every installed distribution when imported (~45-70 ms of CPU under the GIL, a twentieth
    of launch → first answer, and a deprecation warning on recent setuptools); without it jieba opens the same
    files by path (jieba/_compat.py). The import is blocked (a None entry in sys.modules) only while jieba is
    imported, on the thread that opens the runtime, before the store's threads start.
    """
    if "jieba" in sys.modules or "pkg_resources" in sys.modules:
        import jieba

        return cast(ModuleType, jieba)
    sys.modules["pkg_resources"] = None  # type: ignore[assignment]  # "import pkg_resources" raises ImportError
    try:
        import jieba
    finally:
        if "pkg_resources" in sys.modules and sys.modules.get("pkg_resources") is None:
            del sys.modules["pkg_resources"]
    return cast(ModuleType, jieba)


def _warm(embedder: Embedder) -> None:
    try:
        embedder.warm()
    except Exception:  # the first query loads it instead, and reports any error itself
        log.warning("embedder warm-up failed", exc_info=True)
    dense_kernel()  # the in-process index's dense product (~0.15 s to import): here, not in a first search


def _join(threads: list[threading.Thread], seconds: float) -> None:
    """Wait for the start-up warm-ups: what the first request needs is ready before the server answers /healthz.

    Measured after a restart at 10k memories in one namespace: the first search waited 0.65 s for the USE model;
    they all ran in the background while /healthz already answered. Together they take no longer than before: they
    overlap the rest of start-up, and one request no longer pays for them. The store's first search is not one of
    them: it grows with the store, and /readyz waits for it instead (see Runtime.open).
    """
    deadline = time.monotonic() + seconds
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
        if thread.is_alive():
            log.warning("start-up warm-up %s still running after %.0f s: serving meanwhile", thread.name, seconds)


@dataclass
class Runtime:
    """Everything create_app builds once; nodes get a per-request Deps view of it."""

    settings: Settings
    tokenizer: Tokenizer
    store: MilvusStore
    memories: MemoryRepository
    sessions: SessionRepository
    chat: ChatClient | None = None
    llm_gate: LlmGate | None = None
    compaction_slots: WorkSlots | None = None
    backlog: EmbeddingBacklog | None = None
    reranker: Reranker | None = None
    # What the app opened beside the runtime (the key guard's Redis connection): closed with it, after the store.
    closers: list[Callable[[], None]] = field(default_factory=list)
    # The start-up warmer of recently active sessions (acn/app/warmer.py); /readyz reports it.
    warmer: Warmer | None = None
    _closed: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def open(cls, settings: Settings) -> Runtime:
        """Open the store, prepare collections and load the tokenizer and providers."""
        cache = cache_dir_setting(settings.cache_dir)
        reranker = _check_settings(settings)
        warming = _start_warm_ups(settings, cache)
        tokenizer = load_tokenizer(settings.tokenizer, cache)
        store = _open_store(settings)
        try:
            memories = _open_memories(settings, store, cache, warming)
            sessions = _open_sessions(settings, store)
            _check_and_upgrade_store(settings, store, memories, sessions)
            backlog = EmbeddingBacklog(memories, batch=settings.embedding_batch).start() \
                if memories.embed_later else None
            # The store's first search (Lite builds its search structures then) is not waited for: it grows with
            # the whole file (2.5 s at 100k rows; at 1M start-up took 70 s to answer /healthz, past any liveness
            # probe). It runs in the background and /readyz reports it ("store_search") until it is done.
            _join(warming, WARM_WAIT_SECONDS)
        except Exception:
            store.close()
            raise
        # The LLM is optional: with no base URL configured, compaction stays extractive.
        chat = ChatClient.from_settings(settings)
        runtime = cls(settings=settings, tokenizer=tokenizer, store=store, memories=memories, sessions=sessions,
                      chat=chat, llm_gate=LlmGate(settings.llm_max_concurrent),
                      compaction_slots=WorkSlots(settings.compaction_concurrency, settings.compaction_wait_seconds),
                      backlog=backlog, reranker=reranker)
        runtime.warmer = _start_warmer(settings, memories, tokenizer)
        log.info("store ready", extra={"store": store.info()})
        return runtime

    def deps(self, tenant: str) -> Deps:
        """Return the dependencies a node call gets, for one tenant."""
        return Deps(settings=self.settings, tokenizer=self.tokenizer, tenant=tenant, store=self.store,
                    memory_repository=self.memories, session_repository=self.sessions, chat=self.chat,
                    llm_gate=self.llm_gate, compaction_slots=self.compaction_slots, reranker=self.reranker)

    def close(self) -> None:
        """Flush and close the store once; safe to call from a signal handler and atexit."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self.warmer is not None:  # the session in hand finishes first (bounded: then it fails on the closed store)
            self.warmer.stop()
        if self.backlog is not None:  # before the store: a batch in hand finishes; the rest waits for the next start
            self.backlog.stop()
        if self.chat is not None:
            self.chat.close()
        if self.reranker is not None:
            self.reranker.close()
        self.store.close()
        if self.sessions.coordinator is not None:
            self.sessions.coordinator.close()
        for close in self.closers:
            close()


# The steps of Runtime.open, in the order it takes them.


def _check_settings(settings: Settings) -> Reranker | None:
    """Size the text caches and check the settings a request would otherwise trip over; return the reranker."""
    TEXT_CACHE.resize(settings.text_cache_mb << 20)
    parse_allow_list(settings.llm_allowed_urls)  # a malformed entry stops start-up, not a later request
    return Reranker.from_settings(settings)  # likewise a malformed ACN_RERANK_URL


def _start_warm_ups(settings: Settings, cache: Path | None) -> list[threading.Thread]:
    """Start loading what the first request needs while the store opens; return the threads to wait for."""
    # The first text write or search needs jieba's dictionary (~0.2 s from the model cache, ~0.6 s from
    # jieba's own): load it while the store opens, so the first request does not wait for it (jieba's own
    # lock makes an early caller wait).
    import_jieba()  # here, not in the thread: nothing else imports while pkg_resources is blocked
    jieba_thread = threading.Thread(target=_load_jieba, args=(cache, not settings.is_server_uri),
                                    name="acn-jieba", daemon=True)
    jieba_thread.start()
    warming = [jieba_thread, threading.Thread(target=warm_insert_checks, name="acn-insert-warm", daemon=True)]
    warming[-1].start()
    return warming


def _open_store(settings: Settings) -> MilvusStore:
    """Open the Milvus store the settings name, waiting for a server that does not answer yet."""
    return open_store(lambda: MilvusStore(settings.milvus_uri, token=settings.milvus_token,
                                          db_name=settings.milvus_db, flush_every=settings.flush_every_writes,
                                          flush_interval=settings.flush_interval_seconds,
                                          trim_after_flush=settings.trim_after_flush, trim=trim_free_memory,
                                          flush_every_unsearched=settings.flush_every_unsearched_writes),
                      settings.store_wait_seconds)


def _open_memories(settings: Settings, store: MilvusStore, cache: Path | None,
                   warming: list[threading.Thread]) -> MemoryRepository:
    """Open the memories collection with its embedder (warmed in the background, joined with `warming`)."""
    embedder = embedder_from_settings(settings, cache)
    if embedder is not None:  # the model's first call (~0.4 s for e5) is paid here, not by a request
        warming.append(threading.Thread(target=_warm, args=(embedder,), name="acn-embed-warm", daemon=True))
        warming[-1].start()
    embed_later = embeds_in_background(settings, embedder)
    if embed_later and store.is_server and not store.partial_updates:
        # Filling a vector would rewrite whole rows, which another process may be writing (Milvus < 2.6).
        # (A Lite file has one writer process: whole rows rewritten under the repository's write order.)
        log.warning("this Milvus server has no partial updates: rows are embedded as they are written")
        embed_later = False
    memories = MemoryRepository(store, prefix=settings.collection_prefix, embedder=embedder,
                                index_rows=settings.local_index_rows,
                                cache_bytes=settings.read_cache_mb << 20,
                                sealer=RowSealer(settings.encryption_key) if settings.encryption_key else None,
                                embed_later=embed_later,
                                inline_rows=inline_rows(settings, embedder))
    memories.open()
    return memories


def _open_sessions(settings: Settings, store: MilvusStore) -> SessionRepository:
    """Open the sessions collection with its cipher and the session lease (Redis when configured)."""
    sessions = SessionRepository(store, prefix=settings.collection_prefix,
                                 keep_versions=settings.session_versions_kept,
                                 cipher=SnapshotCipher(settings.encryption_key),
                                 redact=settings.redact_snapshots,
                                 coordinator=open_coordinator(settings))
    sessions.open()
    return sessions


def _check_and_upgrade_store(settings: Settings, store: MilvusStore, memories: MemoryRepository,
                             sessions: SessionRepository) -> None:
    """Refuse a store written under another key; bring one written by an older version up to date."""
    # A key setting the store was not written with stops the start, with the reason: served, it would
    # write plaintext into an encrypted store (or text under another key), and /healthz would say ok.
    if isinstance(memories.store, RefusedStore):
        raise memories.store.reason
    marker_cipher = SnapshotCipher(settings.encryption_key, what="store's key marker")
    check_encryption(store, sessions.spec.name, marker_cipher,
                     sealed_memories=store.exists(memories.sealed_collection))
    memories.secret = store_secret(store, sessions.spec.name, marker_cipher)
    # Memories written under another embedder (the default was `none` before it was `use`): copied into
    # this collection before the backlog's first scan, which then fills their vectors.
    carry_over(memories, sessions.spec.name)
    if read_fact(store, sessions.spec.name, "ids_scoped") is None:  # a store from before ids were scoped
        scope_legacy_ids(memories)
        write_fact(store, sessions.spec.name, "ids_scoped", "v1")


def _start_warmer(settings: Settings, memories: MemoryRepository, tokenizer: Tokenizer) -> Warmer:
    """Start building the recently active sessions' indexes in the background (/readyz waits for it)."""
    budget = min(settings.warm_mb, settings.read_cache_mb if memories.cache is not None else settings.warm_mb)
    return Warmer(memories, budget_bytes=budget << 20,
                  reads=lambda tenant, namespace: warm_reads(memories, tokenizer, tenant, namespace),
                  texts=lambda tenant, namespace, budget: warm_texts(memories, tenant, namespace, budget),
                  texts_bytes=texts_budget(),
                  ).start(existed=memories.existed)
