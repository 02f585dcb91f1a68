"""Family nfc: nFC and non-NFC spellings of references, keys and free text."""

from __future__ import annotations

from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments, string_fields, with_string
from ..case import Case, judged
from ..paths import label_of
from ..registry import family
from ..schema import is_free_text, is_nfc_field
from ..vocabulary import ANGSTROM, JAMO, NFD_E

FAMILY = "nfc"


@family(FAMILY)
def nfc_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """A non-NFC reference or key is refused; the same spelling in free text is accepted."""
    out = []
    first_ref = True
    for base, path in string_fields(tool, base_arguments(tool, purpose)):
        name = label_of(path)
        if is_nfc_field(tool, path):
            spellings = [("NFD (e + U+0301)", f"ref-caf{NFD_E}-0000000000")]
            if first_ref:
                spellings += [("U+212B ANGSTROM SIGN", f"ref-{ANGSTROM}-0000000000"),
                              ("decomposed Hangul jamo", f"ref-{JAMO}-0000000000")]
                first_ref = False
            for what, value in spellings:
                out.append(judged(FAMILY, tool, f"{name} in {what}", with_string(tool, base, path, value),
                                  now=now, intent=False))
            out.append(judged(FAMILY, tool, f"{name} in NFC (precomposed U+00E9)",
                              with_string(tool, base, path, "ref-caf\u00e9-0000000000"), now=now, intent=True))
        elif is_free_text(tool, path):  # free text and opaque cursors need not be NFC
            for what, value in (("NFD (e + U+0301)", f"d{NFD_E}cision document{NFD_E}e"),
                                ("U+212B ANGSTROM SIGN", f"{ANGSTROM}ngstr\u00f6m units")):
                out.append(judged(FAMILY, tool, f"{name} (free text) in {what}", with_string(tool, base, path, value),
                                  now=now, intent=True))
    return out
