"""The agent strategy provider (no credentials: the server URL and key are the strategy's node parameters)."""

from dify_plugin.interfaces.agent import AgentProvider


class AgentThatRemembersProvider(AgentProvider):
    pass
