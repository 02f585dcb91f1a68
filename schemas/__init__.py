"""JSON Schemas of Engram memory over MCP 1.0.0 (data only; read through engram_mcp.contract)."""
