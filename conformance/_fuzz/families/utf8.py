"""Family utf8-boundaries: every byte-bounded string at its bounds and one byte beyond, in 1- to 4-byte characters."""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments, fill, string_fields, with_string
from ..case import Case, judged
from ..paths import label_of
from ..registry import family
from ..schema import byte_bounds
from ..vocabulary import WIDE

FAMILY = "utf8-boundaries"


@family(FAMILY)
def utf8_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    out = []
    for base, path in string_fields(tool, base_arguments(tool, purpose)):
        bounds = byte_bounds(tool, path)
        if bounds is None:
            continue
        low, high = bounds
        name = label_of(path)
        if high is not None:
            for width in (1, 2, 3, 4):
                out.append(judged(FAMILY, tool, f"{name}: {high} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(high, width)), now=now, intent=True))
            # One byte over: in ASCII (over maxLength too), and in characters few enough for maxLength
            # (a 4-byte run then one ASCII byte), which only a byte count refuses.
            for width in (1, 4):
                out.append(judged(FAMILY, tool, f"{name}: {high + 1} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(high + 1, width)), now=now, intent=False))
        if low > 1:
            for width in (1, 2, 3, 4):
                out.append(judged(FAMILY, tool, f"{name}: {low} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(low, width)), now=now, intent=True))
            for width in (1, 4):  # a 4-byte run passes minLength in characters; only the byte count refuses it
                out.append(judged(FAMILY, tool, f"{name}: {low - 1} bytes of {width}-byte characters",
                                  with_string(tool, base, path, fill(low - 1, width)), now=now, intent=False))
        elif low == 1:
            out.append(judged(FAMILY, tool, f"{name}: one 4-byte character",
                              with_string(tool, base, path, WIDE[4]), now=now, intent=True))
            out.append(judged(FAMILY, tool, f"{name}: empty",
                              with_string(tool, base, path, ""), now=now, intent=False))
        else:
            out.append(judged(FAMILY, tool, f"{name}: empty (no lower bound)",
                              with_string(tool, base, path, ""), now=now, intent=True))
    return out
