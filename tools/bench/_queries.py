"""Search queries for the measures: drawn one after another from one seeded text source.

Apart from ``_text`` on purpose: that module's source is part of a built store's fingerprint, and how queries
are drawn never changes what a store holds.
"""

from __future__ import annotations

from tools.bench._text import TextSource


def queries(seed: int, count: int) -> list[str]:
    """``count`` queries from one source: varied, and the same for the same seed."""
    source = TextSource(seed=seed)
    return [source.query() for _ in range(count)]
