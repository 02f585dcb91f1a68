"""The labelled corpus under fixtures/arguments/, each case as labelled."""

from __future__ import annotations

import json
from typing import Any

from ..case import Case
from ..schema import CONTRACT

FIXTURE_SIZE_CAP = 32 * 1024  # canonical bytes; larger cases are the size-driven families' business


def fixture_cases(tool: str, *, everything: bool = False) -> list[Case]:
    """The shipped corpus, each case as labelled.

    Cases over FIXTURE_SIZE_CAP canonical bytes (texts and arrays at their
    bounds, arguments near arguments.max_bytes) are left out unless
    ``everything``: they cost the most to send, and the utf8-boundaries,
    capture-shape and size-boundary families send the same bounds anyway."""
    out = []
    for entry in CONTRACT.fixture(f"arguments/{tool}.json")["cases"]:
        if not everything and _rough_size(entry["arguments"]) > FIXTURE_SIZE_CAP:
            continue
        breaks = tuple(entry.get("breaks", ()))
        out.append(Case("fixtures", tool, entry["description"], entry["arguments"], entry["valid"],
                        entry.get("code"), breaks, entry["valid"], tuple(entry.get("pins", ()))))
    return out


def _rough_size(arguments: Any) -> int:
    """About the canonical size (exact for the corpus's plain data); it only sorts big from small."""
    return len(json.dumps(arguments, ensure_ascii=False, separators=(",", ":")).encode("utf-8", "surrogatepass"))
