"""Family null: null at every property and in every array."""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import array_paths, get_at, label_of, member_paths, put
from ..registry import family

FAMILY = "null"


@family(FAMILY)
def null_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    out = [judged(FAMILY, tool, f"{label_of(path)}: null", put(base, path, None), now=now, intent=False)
           for path in member_paths(base)]
    out += [judged(FAMILY, tool, f"{label_of(path)}: a null item", put(base, path, [*get_at(base, path), None]),
                   now=now, intent=False)
            for path in array_paths(base)]
    return out
