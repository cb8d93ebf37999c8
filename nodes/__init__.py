"""The node registry: name -> NodeSpec. Each node lives in its own module and exports NODE."""

from __future__ import annotations

import importlib

from nodes.spec import NodeSpec

# Order is the order of the manifest and the OpenAPI document.
NODE_MODULES = (
    "nodes.edit_context",
    "nodes.compact",
    "nodes.memory_write",
    "nodes.memory_retrieve",
)


def all_nodes() -> dict[str, NodeSpec]:
    """Return every node keyed by its route name."""
    specs = [importlib.import_module(module).NODE for module in NODE_MODULES]
    return {spec.name: spec for spec in specs}
