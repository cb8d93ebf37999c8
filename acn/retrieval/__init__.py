"""Retrieval: rank stored memories for a query and render them as tagged lines."""
