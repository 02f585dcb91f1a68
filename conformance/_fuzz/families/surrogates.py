"""Family lone-surrogates: unencodable text (lone surrogates) in values and in keys."""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments, string_fields, with_string
from ..case import Case, judged
from ..paths import label_of, put
from ..registry import family
from ..schema import is_free_text, is_nfc_field

FAMILY = "lone-surrogates"


@family(FAMILY)
def surrogate_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    out = []
    for holder, path in string_fields(tool, base):
        if not (is_free_text(tool, path) or is_nfc_field(tool, path)):
            continue
        out.append(judged(FAMILY, tool, f"{label_of(path)} holding U+D800",
                          with_string(tool, holder, path, "text-\ud800-0000000000"), now=now, intent=False))
    out.append(judged(FAMILY, tool, "an object key holding U+DC00",
                      put(base, ("key-\udc00",), "value"), now=now, intent=False))
    return out
