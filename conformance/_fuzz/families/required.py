"""Family required: every property left out, one at a time."""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import drop, label_of, member_paths
from ..registry import family
from ..schema import schema_at

FAMILY = "required"


@family(FAMILY)
def required_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Each member left out: a required one is refused, an optional one is not."""
    base = base_arguments(tool, purpose)
    out = []
    for path in member_paths(base):
        parent = schema_at(tool, path[:-1])
        required = path[-1] in parent.get("required", [])
        out.append(judged(FAMILY, tool, f"{label_of(path)} left out ({'required' if required else 'optional'})",
                          drop(base, path), now=now, intent=not required))
    return out
