"""Plugin entry point: the Dify plugin daemon runs `python -m main` in a Python 3.12 environment."""

from dify_plugin import DifyPluginEnv, Plugin

# record_turn may compact a long session; give it more than the SDK's default request timeout.
plugin = Plugin(DifyPluginEnv(MAX_REQUEST_TIMEOUT=120))

if __name__ == "__main__":
    plugin.run()
