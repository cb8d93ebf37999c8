"""Agent Context Nodes: HTTP workflow nodes that keep LLM agents from forgetting.

Every product package lives below this one root (acn.nodes, acn.storage, ...), so installing the pack adds one
import name to a user's environment, not fifteen.
"""
