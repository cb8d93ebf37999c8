"""The node registry: name -> NodeSpec. A node module exports NODE (or NODES for a small family)."""

from __future__ import annotations

import importlib

from nodes.spec import NodeSpec

# Order is the order of the manifest and the OpenAPI document.
NODE_MODULES = (
    "nodes.edit_context",
    "nodes.compact",
    "nodes.memory_write",
    "nodes.memory_retrieve",
    "nodes.assemble",
    "nodes.record_turn",
    "nodes.sessions",
)


def all_nodes() -> dict[str, NodeSpec]:
    """Return every node keyed by its route name."""
    specs: list[NodeSpec] = []
    for name in NODE_MODULES:
        module = importlib.import_module(name)
        specs += list(getattr(module, "NODES", None) or [module.NODE])
    return {spec.name: spec for spec in specs}
