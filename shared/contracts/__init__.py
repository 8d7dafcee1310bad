"""Published contracts: the operator API (OpenAPI), the messages (AsyncAPI, JSON Schema)."""
