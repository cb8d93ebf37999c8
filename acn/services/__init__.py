"""The typed bundle of services a node call gets (Deps)."""
