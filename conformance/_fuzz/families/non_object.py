"""Family non-object: arguments that are not a JSON object."""

from __future__ import annotations

import json
from datetime import datetime

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..registry import family

FAMILY = "non-object"


@family(FAMILY)
def non_object_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    rows = [("an empty object", {}), ("an empty array", []), ("an array holding valid arguments", [base]),
            ("a JSON string of valid arguments", json.dumps(base)), ("the number 0", 0), ("the number 1.5", 1.5),
            ("true", True), ("null (the SDK then sends no arguments)", None)]
    return [judged(FAMILY, tool, f"arguments: {label}", args, now=now, intent=False) for label, args in rows]
