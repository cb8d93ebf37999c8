"""What a node receives besides its request: the store, the tokenizer and the providers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from text.tokens import Tokenizer

if TYPE_CHECKING:
    from common.settings import Settings
    from storage.base import MemoryStore


@dataclass
class Deps:
    """Everything a node may use; built once by create_app and passed to every node call."""

    settings: Settings
    tokenizer: Tokenizer
    store: MemoryStore | None = None
    tenant: str = "default"
    providers: dict[str, Any] = field(default_factory=dict)
