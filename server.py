"""`python server.py [--host H] [--port P]`: start the plugin server (acn.server holds it; this file stays thin).

Run as a script, the cyclic garbage collector is off until the server's imports are done (acn.server.main
freezes them and switches it back on); imported, this module only re-exports.
"""

# ruff: noqa: E402  (the collector is switched off before the imports, so gc comes first)
from __future__ import annotations

import gc

if __name__ == "__main__":
    gc.disable()

from acn.server import create_app, freeze_imports, main

__all__ = ["create_app", "freeze_imports", "main"]

if __name__ == "__main__":
    main()
