"""Platform integrations: the Dify plugin, Dify/Coze OpenAPI exports and the Dify API-based extension."""
