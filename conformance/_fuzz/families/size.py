"""Family size-boundary: arguments of exactly arguments.max_bytes canonical bytes, and one more."""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments, canonical_size, sized_capture
from ..case import Case, judged
from ..paths import get_at, put
from ..registry import family
from ..schema import ARGUMENTS_MAX_BYTES
from ..vocabulary import CAPTURE, GET, SEARCH

FAMILY = "size-boundary"


@family(FAMILY)
def size_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """At exactly arguments.max_bytes a capture is valid; one byte more is refused, for every tool.

    Only capture can be valid that large: every other tool's strings are bounded
    far below it, so for them only the oversized case is meaningful.
    """
    out = []
    if tool == CAPTURE:
        # 4-byte text catches a size measured on ASCII-escaped JSON (too strict at the limit); control
        # characters, 1 byte of text but 6 of canonical JSON, catch a size measured on the text (too lax).
        for filler, sizes in (("ascii", (0, 1)), ("4-byte", (0,)), ("control", (0, 1))):
            for over in sizes:
                total = ARGUMENTS_MAX_BYTES + over
                what = "exactly" if not over else "one byte over:"
                out.append(judged(FAMILY, tool, f"{what} {total} canonical bytes ({filler} text)",
                                  sized_capture(total, filler, purpose=purpose), now=now, intent=not over))
        return out
    base = base_arguments(tool, purpose)
    path = {SEARCH: ("query",), GET: ("record_id",)}.get(tool, ("idempotency_key",))
    args = put(base, path, get_at(base, path) + "a" * (ARGUMENTS_MAX_BYTES + 1 - canonical_size(base)))
    out.append(judged(FAMILY, tool, f"{ARGUMENTS_MAX_BYTES + 1} canonical bytes (an overlong {path[0]})",
                      args, now=now, intent=False))
    return out
