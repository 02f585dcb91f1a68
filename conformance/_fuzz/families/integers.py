"""Family safe-integers: 2^53-1, 2^53, 1.5 and other non-integers wherever an integer goes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import put
from ..registry import family
from ..schema import MAX_SAFE
from ..vocabulary import CAPTURE, GET, SEARCH

FAMILY = "safe-integers"


@family(FAMILY)
def integer_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Integers at and beyond ±(2^53-1), and numbers that are not integers, wherever an integer goes."""
    base = base_arguments(tool, purpose)
    rows: list[tuple[str, Any, bool]] = []
    if tool == CAPTURE:
        vt, at = ("payload", "valid_time"), ("payload", "primary_event", "at")
        rows += [
            ("valid_time t and t_end at 2^53-1", put(base, vt, {"t": MAX_SAFE, "t_end": MAX_SAFE}), True),
            ("valid_time from -(2^53-1) to 2^53-1", put(base, vt, {"t": -MAX_SAFE, "t_end": MAX_SAFE}), True),
            ("valid_time.t at 2^53", put(base, vt, {"t": MAX_SAFE + 1}), False),
            ("valid_time.t at -2^53", put(base, vt, {"t": -MAX_SAFE - 1}), False),
            ("valid_time.t_end at 2^53", put(base, vt, {"t": 0, "t_end": MAX_SAFE + 1}), False),
            ("valid_time.t at 2^64", put(base, vt, {"t": 2**64}), False),
            ("valid_time.t 1.5", put(base, vt, {"t": 1.5}), False),
            ("valid_time.t 1e16 (a float beyond 2^53)", put(base, vt, {"t": 1e16}), False),
            ("valid_time.t the string 1", put(base, vt, {"t": "1"}), False),
            ("valid_time.t true", put(base, vt, {"t": True}), False),
            ("primary_event.at at 2^53-1", put(base, at, MAX_SAFE), True),
            ("primary_event.at at -(2^53-1)", put(base, at, -MAX_SAFE), True),
            ("primary_event.at at 2^53", put(base, at, MAX_SAFE + 1), False),
            ("primary_event.at at 2^53+1", put(base, at, MAX_SAFE + 2), False),
            ("primary_event.at 0.5", put(base, at, 0.5), False),
            ("schema_version 2.5", put(base, ("payload", "schema_version"), 2.5), False),
        ]
    if tool == SEARCH:
        rows += [
            ("limit 2^53", put(base, ("limit",), MAX_SAFE + 1), False),
            ("limit 10.5", put(base, ("limit",), 10.5), False),
        ]
    if tool in (SEARCH, GET):
        rows += [
            ("max_packet_bytes 2^53", put(base, ("max_packet_bytes",), MAX_SAFE + 1), False),
            ("max_packet_bytes 4096.5", put(base, ("max_packet_bytes",), 4096.5), False),
        ]
    return [judged(FAMILY, tool, label, args, now=now, intent=intent) for label, args, intent in rows]
