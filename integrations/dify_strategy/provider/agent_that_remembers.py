"""The agent strategy provider (no credentials: the server URL and key are the strategy's node parameters)."""

from dify_plugin.interfaces.agent import AgentProvider


class AgentThatRemembersProvider(AgentProvider):
    """Nothing to validate: the SDK finds the strategy through the provider yaml (as cot_agent's provider does)."""
