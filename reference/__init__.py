"""The reference MCP server for Engram memory over MCP 1.0.0."""
