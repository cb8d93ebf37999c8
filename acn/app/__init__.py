"""Wiring: the runtime, settings to objects, the OpenAPI document, the CLI."""
