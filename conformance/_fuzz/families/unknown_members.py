"""Family unknown-members: a member no schema names, at every object level, where a closed schema refuses it.

Schema-driven draws (``schemathesis-negative``) reach such a case only when a seed happens to add a member
alone; this family adds one at each level of a valid base every time, so a server that ignores unknown members
instead of refusing them fails on the first run whatever the seed.
"""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import label_of, object_paths, put
from ..registry import family

FAMILY = "unknown-members"
# A name no tool's schema uses and no host owns: what a client's own extension or a typo would send.
UNKNOWN_MEMBER = "x_unlisted_member"


@family(FAMILY)
def unknown_member_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """One unknown member at each object level of a valid base."""
    base = base_arguments(tool, purpose)
    return [judged(FAMILY, tool, f"{UNKNOWN_MEMBER} in {label_of(level)}", put(base, level + (UNKNOWN_MEMBER,), 1),
                   now=now, intent=False)
            for level in object_paths(base)]
