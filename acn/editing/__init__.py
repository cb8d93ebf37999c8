"""Editing pipeline: rule-based edits of a message list (the edit_context node and record_turn use it)."""
