"""Family instants: instant shapes, real calendar times, an expiry after the capture."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, FAR_FUTURE, base_arguments
from ..case import Case, judged
from ..paths import put
from ..registry import family
from ..vocabulary import CAPTURE

FAMILY = "instants"


@family(FAMILY, tools=(CAPTURE,))
def instant_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Instants: shape, calendar, and an expiry strictly after the capture time."""
    base = base_arguments(tool, purpose)
    observed = ("payload", "citations", 0, "observed_at")
    retention = ("payload", "retention")
    rows: list[tuple[str, Any, bool]] = [
        (f"observed_at {what}", put(base, observed, value), valid) for what, value, valid in (
            ("on a leap day", "2024-02-29T23:59:59.999Z", True),
            ("at the first millisecond of year 0000", "0000-01-01T00:00:00.000Z", True),
            ("on 29 February of a common year", "2026-02-29T12:00:00.000Z", False),
            ("on 31 April", "2026-04-31T12:00:00.000Z", False),
            ("at hour 24", "2026-08-16T24:00:00.000Z", False),
            ("at minute 60", "2026-08-16T23:60:00.000Z", False),
            ("at second 60", "2016-12-31T23:59:60.000Z", False),
            ("without milliseconds", "2026-08-16T12:00:00Z", False),
            ("with a +00:00 offset", "2026-08-16T12:00:00.000+00:00", False),
            ("with a trailing newline", "2026-08-16T12:00:00.000Z\n", False),
        )
    ]
    rows += [
        (f"expires_at {what}", put(base, retention, {"derivative_rule": "make-ineligible", "expires_at": value}), valid)
        for what, value, valid in (("far in the future", FAR_FUTURE, True),
                                   ("in the past", "2001-01-01T00:00:00.000Z", False),
                                   ("on a day that does not exist", "2099-02-29T00:00:00.000Z", False))
    ]
    return [judged(FAMILY, tool, label, args, now=now, intent=intent) for label, args, intent in rows]
