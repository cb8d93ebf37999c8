"""record_turn's pipeline: append a turn, archive it, edit the buffer, extract memories, compact when due."""
