"""The node registry: name -> NodeSpec. A node module exports NODE (or NODES for a small family)."""

from __future__ import annotations

import importlib

from acn.nodes.spec import NodeSpec

# Order is the order of the manifest and the OpenAPI document.
NODE_MODULES = (
    "acn.nodes.edit_context",
    "acn.nodes.compact",
    "acn.nodes.memory_write",
    "acn.nodes.memory_retrieve",
    "acn.nodes.assemble",
    "acn.nodes.record_turn",
    "acn.nodes.sessions",
    "acn.nodes.external_memory",
)


def all_nodes() -> dict[str, NodeSpec]:
    """Return every node keyed by its route name."""
    specs: list[NodeSpec] = []
    for name in NODE_MODULES:
        module = importlib.import_module(name)
        specs += list(getattr(module, "NODES", None) or [module.NODE])
    return {spec.name: spec for spec in specs}
