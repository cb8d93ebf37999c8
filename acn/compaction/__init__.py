"""Segmented compaction of old turns into structured summaries (extractive or LLM), verified for numbers."""
