"""Family zero-fractions: 1.0 and other integral numbers written with a fraction, wherever an integer goes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import put
from ..registry import family
from ..vocabulary import CAPTURE, GET, SEARCH

FAMILY = "zero-fractions"


@family(FAMILY)
def zero_fraction_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """A number with a zero fraction (1.0) where an integer goes: accepted, as the integer it equals."""
    base = base_arguments(tool, purpose)
    rows: list[tuple[str, Any]] = []
    if tool == CAPTURE:
        vt = ("payload", "valid_time")
        rows += [
            ("valid_time t 1.0 and t_end 1.0", put(base, vt, {"t": 1.0, "t_end": 1.0})),
            ("valid_time t 1.0 and t_end 2", put(base, vt, {"t": 1.0, "t_end": 2})),
            ("primary_event.at 1.0", put(base, ("payload", "primary_event", "at"), 1.0)),
            ("schema_version 2.0", put(base, ("payload", "schema_version"), 2.0)),
        ]
    if tool == SEARCH:
        rows += [("limit 1.0", put(base, ("limit",), 1.0)), ("limit 50.0", put(base, ("limit",), 50.0))]
    if tool in (SEARCH, GET):
        rows += [("max_packet_bytes 4096.0", put(base, ("max_packet_bytes",), 4096.0)),
                 ("max_packet_bytes 1048576.0", put(base, ("max_packet_bytes",), 1048576.0))]
    return [judged(FAMILY, tool, label, args, now=now, intent=True) for label, args in rows]
