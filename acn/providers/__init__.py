"""Adapters to remote providers; each wraps its HTTP errors into the pack's typed errors."""
