"""Text cut to fit a line, between words: every report and console line shortens through here
(``engram_mcp.contract._words``, shared with the contract model's descriptions of answers)."""

from __future__ import annotations

from engram_mcp.contract._words import answer_words, clipped, os_reason, quoted, spoken

__all__ = ["answer_words", "clipped", "os_reason", "quoted", "spoken"]
