"""Family cross-references: capture's internal references, uniqueness and ordering rules."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import put
from ..registry import family
from ..vocabulary import CAPTURE, DIGEST_B

FAMILY = "cross-references"


@family(FAMILY, tools=(CAPTURE,))
def cross_reference_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    P = ("payload",)
    second = {"citation_id": "citation:second", "source_ref": "source:second",
              "locator": {"scheme": "document", "value": "fuzzing#2"}, "content_digest": DIGEST_B}
    two = put(base, P + ("citations",), [base["payload"]["citations"][0], second])
    families = P + ("reconciliation", "family_refs")
    cited = P + ("components", 0, "citation_ids")
    rows: list[tuple[str, Any, bool]] = [
        ("a component citing an unknown citation", put(base, cited, ["citation:first", "citation:missing"]), False),
        ("primary_component_id naming no component",
         put(base, P + ("primary_component_id",), "component:missing"), False),
        ("primary_event citing an unknown citation",
         put(base, P + ("primary_event", "citation_id"), "citation:missing"), False),
        ("primary_event citing a citation outside the primary component",
         put(two, P + ("primary_event", "citation_id"), "citation:second"), False),
        ("primary_event citing the primary component's second citation",
         put(put(two, P + ("components", 0, "citation_ids"), ["citation:first", "citation:second"]),
             P + ("primary_event", "citation_id"), "citation:second"), True),
        ("evidence naming an unknown citation", put(base, ("evidence", "citation_ids"), ["citation:missing"]), False),
        ("evidence naming a component id", put(base, ("evidence", "citation_ids"), ["component:primary"]), False),
        ("evidence naming a subset of two citations",
         put(two, ("evidence", "citation_ids"), ["citation:second"]), True),
        ("two citations sharing a citation_id",
         put(base, P + ("citations",), [second | {"citation_id": "citation:first"}, base["payload"]["citations"][0]]),
         False),
        ("two components sharing a component_id",
         put(base, P + ("components",), base["payload"]["components"] * 2), False),
        ("family refs out of order", put(base, families, ["family:beta", "family:alpha"]), False),
        ("family refs repeated", put(base, families, ["family:alpha", "family:alpha"]), False),
        ("family refs sorted", put(base, families, ["family:alpha", "family:beta"]), True),
        ("family refs in UTF-16 order (U+1F600 before U+FF01; code-point order differs)",
         put(base, families, ["family:\U0001f600", "family:\uff01"]), True),
        ("family refs in code-point order (U+FF01 before U+1F600)",
         put(base, families, ["family:\uff01", "family:\U0001f600"]), False),
        ("valid_time.t_end one before t",
         put(base, P + ("valid_time",), {"t": 1_700_000_000_000, "t_end": 1_699_999_999_999}), False),
        ("valid_time.t_end equal to t", put(base, P + ("valid_time",), {"t": 5, "t_end": 5}), True),
    ]
    return [judged(FAMILY, tool, label, args, now=now, intent=intent) for label, args, intent in rows]
