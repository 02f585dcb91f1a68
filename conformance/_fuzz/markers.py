"""Arguments carrying a marker, for the checks that no reply reflects the caller's input."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .bases import DEFAULT_PURPOSE, base_arguments, distinct_string_fields, with_string
from .case import oracle, utc_now
from .paths import Path, label_of, object_paths, put
from .schema import is_free_text, is_nfc_field, is_patterned, purpose_path
from .vocabulary import CAPTURE, NFD_E, SEARCH


@dataclass(frozen=True, eq=False)
class Planted:
    """Arguments carrying a marker; ``valid`` says whether the oracle accepts them."""

    label: str
    arguments: Any
    valid: bool


def _marked_everywhere(tool: str, base: dict[str, Any], marker: str, paths: list[Path]) -> dict[str, Any]:
    out = base
    for n, path in enumerate(paths):
        out = with_string(tool, out, path, f"{marker}-{n:02d}")
    return out


def marker_cases(tool: str, marker: str, *, purpose: str = DEFAULT_PURPOSE) -> list[Planted]:
    """Arguments with a marker planted in every string the caller writes, valid and not.

    The marker should be plain lowercase ASCII (letters and digits), at least 12
    characters, so that it survives any escaping and can be searched for as a word.
    """
    base = base_arguments(tool, purpose)
    own = purpose_path(tool)
    free = [p for p in distinct_string_fields(tool, base)
            if p != own and (is_free_text(tool, p) or is_nfc_field(tool, p))]
    patterned = [p for p in distinct_string_fields(tool, base) if is_patterned(tool, p)]
    deepest = max(object_paths(base), key=len)
    rows: list[tuple[str, Any]] = []
    if free:
        rows.append(("the marker in every free field", _marked_everywhere(tool, base, marker, free)))
    for path in patterned:
        rows.append((f"the marker as {label_of(path)}", with_string(tool, base, path, marker)))
    rows += [
        ("an unknown member named and valued with the marker", put(base, (marker,), marker)),
        (f"an unknown member in {label_of(deepest)}", put(base, deepest + (f"note_{marker}",), marker)),
        ("a host-owned member valued with the marker", put(base, ("tenant",), marker)),
    ]
    for path in free[:1] + ([own] if own else []):
        rows.append((f"{label_of(path)} far over its bound, repeating the marker",
                     with_string(tool, base, path, (marker + " ") * 1700)))
    references = [p for p in free if is_nfc_field(tool, p)] or ([own] if own else [])
    if references:
        rows.append((f"{label_of(references[0])} in NFD around the marker",
                     with_string(tool, base, references[0], f"{marker}-caf{NFD_E}")))
    if own is not None:
        rows.append(("the marker as a purpose other than the bound one", put(base, own, marker)))
    if tool == SEARCH:
        rows.append(("the marker as a page cursor", put(base, ("page_cursor",), marker)))
    if tool == CAPTURE:
        rows.append(("the marker as a family nobody consented to",
                     put(base, ("payload", "reconciliation", "family_refs"), [f"family:{marker}"])))
    checker = oracle()
    return [Planted(label, args, checker.verdict(tool, args, now=utc_now()).valid) for label, args in rows]

