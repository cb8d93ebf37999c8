"""What a node receives besides its request: settings, tokenizer, tenant and the services, typed."""

from __future__ import annotations

from dataclasses import dataclass

from acn.common.errors import StoreNotConfiguredError
from acn.common.settings import Settings
from acn.providers.llm_guard import LlmGate
from acn.providers.openai_chat import ChatClient
from acn.providers.rerank import Reranker
from acn.services.slots import WorkSlots
from acn.storage.database import MemoryStore
from acn.storage.repositories import MemoryRepository, SessionRepository
from acn.text.tokens import Tokenizer


@dataclass(frozen=True, slots=True)
class Deps:
    """Everything a node may use; app.runtime builds one per call (per tenant).

    The repositories are optional so that a stateless node (edit_context) can run without a store; a node
    that needs one reads `memories`/`sessions`, which refuse with a clear error when none is configured.
    """

    settings: Settings
    tokenizer: Tokenizer
    tenant: str = "default"
    store: MemoryStore | None = None
    memory_repository: MemoryRepository | None = None
    session_repository: SessionRepository | None = None
    chat: ChatClient | None = None
    llm_gate: LlmGate | None = None
    compaction_slots: WorkSlots | None = None
    # ACN_RERANK_URL's reranker, None when off; its rerank() never raises (a failure keeps the original order).
    reranker: Reranker | None = None

    @property
    def memories(self) -> MemoryRepository:
        """The memory repository; StoreNotConfiguredError when none was wired in."""
        if self.memory_repository is None:
            raise StoreNotConfiguredError("no memory store is configured")
        return self.memory_repository

    @property
    def sessions(self) -> SessionRepository:
        """The session repository; StoreNotConfiguredError when none was wired in."""
        if self.session_repository is None:
            raise StoreNotConfiguredError("no session store is configured")
        return self.session_repository
