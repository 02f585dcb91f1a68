"""Family capture-shape: capture's arrays at their item bounds and one beyond, unknown kinds, repeated ids."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import drop, put
from ..registry import family
from ..vocabulary import CAPTURE

FAMILY = "capture-shape"


@family(FAMILY, tools=(CAPTURE,))
def capture_shape_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    """Capture's arrays at their item bounds and one beyond, unknown kinds, repeated ids in id lists."""
    base = base_arguments(tool, purpose)
    P = ("payload",)
    first = base["payload"]["components"][0]
    citation = base["payload"]["citations"][0]

    def components(n: int) -> dict[str, Any]:
        items = [first] + [{"component_id": f"component:{i:02d}", "kind": "context", "text": f"Part {i}.",
                            "citation_ids": ["citation:first"]} for i in range(1, n)]
        return put(base, P + ("components",), items)

    def citations(n: int) -> dict[str, Any]:
        items = [citation] + [{**citation, "citation_id": f"citation:{i:03d}"} for i in range(1, n)]
        return put(base, P + ("citations",), items)

    many = [f"citation:{i:03d}" for i in range(1, 257)]
    families = P + ("reconciliation", "family_refs")
    rows: list[tuple[str, Any, bool]] = [
        ("no components", put(base, P + ("components",), []), False),
        ("64 components", components(64), True),
        ("65 components", components(65), False),
        ("a component of kind note", put(base, P + ("components", 0, "kind"), "note"), False),
        ("a component citing nothing", put(base, P + ("components", 0, "citation_ids"), []), False),
        ("a component citing one citation twice",
         put(base, P + ("components", 0, "citation_ids"), ["citation:first", "citation:first"]), False),
        ("no citations", put(base, P + ("citations",), []), False),
        ("256 citations", citations(256), True),
        ("257 citations", citations(257), False),
        ("a component citing 257 citation ids",
         put(base, P + ("components", 0, "citation_ids"), ["citation:first", *many]), False),
        ("evidence naming 257 citation ids",
         put(base, ("evidence", "citation_ids"), ["citation:first", *many]), False),
        ("a citation whose locator has no value",
         put(base, P + ("citations", 0, "locator"), {"scheme": "document"}), False),
        ("a citation without a locator", drop(base, P + ("citations", 0, "locator")), False),
        ("evidence naming no citation", put(base, ("evidence", "citation_ids"), []), False),
        ("evidence naming one citation twice", put(base, ("evidence", "citation_ids"), ["citation:first"] * 2), False),
        ("64 family refs", put(base, families, [f"family:{i:02d}" for i in range(64)]), True),
        ("65 family refs", put(base, families, [f"family:{i:02d}" for i in range(65)]), False),
        ("no family refs", put(base, families, []), True),
    ]
    return [judged(FAMILY, tool, label, args, now=now, intent=intent) for label, args, intent in rows]
