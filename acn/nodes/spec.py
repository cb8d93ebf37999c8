"""What a node is: a pure function from a request model to a response model, with its descriptions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from acn.common.models import NodeResponse
from acn.services.deps import Deps


@dataclass(frozen=True)
class Description:
    """Human and LLM-facing descriptions in English and Simplified Chinese (Dify's split)."""

    human_en: str
    human_zh: str
    llm_en: str
    llm_zh: str


@dataclass(frozen=True)
class NodeSpec:
    """One node: its route name, models, run function and descriptions."""

    name: str
    request_model: type[BaseModel]
    response_model: type[BaseModel]
    run: Callable[[Any, Deps], NodeResponse]
    description: Description
    summary: str
    stateful: bool = True
