"""The tool provider: checks the server URL and API key when a Dify user saves them."""

from typing import Any

from dify_plugin import ToolProvider
from dify_plugin.errors.tool import ToolProviderCredentialValidationError

from acn_client import NodeCallError, check_server


class AgentContextNodesProvider(ToolProvider):
    def _validate_credentials(self, credentials: dict[str, Any]) -> None:
        try:
            check_server(credentials)
        except NodeCallError as error:
            raise ToolProviderCredentialValidationError(str(error)) from None
