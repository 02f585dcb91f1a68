"""What search and get may reveal (§1): only accepted_current records of the bound scope.

A record past its expires_at is no longer current. The server judges that on its own clock, which may be
``clock_skew`` away from the host's, so within that margin of the expiry both answers are allowed.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from engram_mcp.contract._loader import load
from engram_mcp.contract.model._state import Content, Record, RecordState

BUDGET_MIN = load().limit("max_packet_bytes.min")

Expiry = Literal["current", "expired", "either"]


INSTANT = re.compile(r"^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{3})Z$")


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date, for any year (0000 included, which datetime refuses)."""
    year -= month <= 2
    era = year // 400
    of_era = year - era * 400
    of_year = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    of_cycle = of_era * 365 + of_era // 4 - of_era // 100 + of_year
    return era * 146097 + of_cycle - 719468


def instant_ms(text: Any) -> int | None:
    """An Instant (YYYY-MM-DDTHH:mm:ss.sssZ) in epoch milliseconds; None when there is none to read."""
    match = INSTANT.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    year, month, day, hour, minute, second, milli = (int(g) for g in match.groups())
    return ((_days_from_civil(year, month, day) * 24 + hour) * 60 + minute) * 60_000 + second * 1000 + milli


def expiry(content: Content, now_ms: int, skew_ms: int) -> Expiry:
    if content.expires_at is None or content.expires_at - now_ms > skew_ms:
        return "current"
    return "expired" if now_ms - content.expires_at > skew_ms else "either"


Visibility = Literal["visible", "hidden", "either"]


def visibility(record: Record, now_ms: int, skew_ms: int) -> Visibility:
    """Whether search and get must show the record (visible), must not (hidden), or may either way."""
    if record.state is RecordState.DOUBTFUL:
        return "either"
    if record.state is not RecordState.CURRENT:
        return "hidden"
    judged = expiry(record.content, now_ms, skew_ms)
    if judged == "current":
        return "visible"
    return "hidden" if judged == "expired" else "either"


def surely_fits(content: Content, budget: int) -> bool:
    """Whether a record's packet fits any reasonable packet format within ``budget``: twice its text (the text
    may be escaped) and twice the smallest budget for whatever else a server puts in a packet. Short of that, a
    server may answer PROJECTION_OVERSIZED."""
    return 2 * content.text_bytes + 2 * BUDGET_MIN <= budget
