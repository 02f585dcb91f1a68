"""Text cut to fit a line, between words: every report and console line shortens through here."""

from __future__ import annotations


def clipped(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut between words (never inside one), with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = head.rsplit(None, 1)[0] if " " in head.strip() else head
    return cut.rstrip(" ,;:") + "…"
