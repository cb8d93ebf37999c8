"""Plugin entry point: the Dify plugin daemon runs `python -m main` in a Python 3.12 environment."""

from dify_plugin import DifyPluginEnv, Plugin

# An agent run calls the model and tools several times: give it the limits Dify's own agent strategies take.
plugin = Plugin(DifyPluginEnv(MAX_REQUEST_TIMEOUT=240, MAX_INVOCATION_TIMEOUT=900))

if __name__ == "__main__":
    plugin.run()
