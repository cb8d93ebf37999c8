"""The memory write path (items, pool, dedup, supersede, write) and the archive of raw turns."""
