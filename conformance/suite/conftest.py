"""Fixtures come from engram_mcp.conformance._plugin; nothing is defined here."""
