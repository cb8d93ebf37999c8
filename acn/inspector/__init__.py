"""A read-only context inspector at /ui: namespaces, session timeline, versions, memories, assemble preview."""

from acn.inspector.views import create_blueprint

__all__ = ["create_blueprint"]
