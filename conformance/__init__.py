"""The conformance harness for Engram memory over MCP 1.0.0."""
