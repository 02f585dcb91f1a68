"""Family identifiers: record and candidate id near-misses, each in the other's slot."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ..bases import DEFAULT_PURPOSE, base_arguments
from ..case import Case, judged
from ..paths import put
from ..registry import family
from ..vocabulary import ADMIT, FORGET, GET, WITHDRAW

FAMILY = "identifiers"


@family(FAMILY)
def identifier_cases(tool: str, *, purpose: str = DEFAULT_PURPOSE, now: datetime | None = None) -> list[Case]:
    base = base_arguments(tool, purpose)
    body = "y5lyhrr2w42rak7rz6h3gypy53rhohj2zszdhj7gpqzvjnijiqkq"
    hexpart = "7c2147c69a1394198962533640d865bc4f2fdf8f6b1e753e8ad28856d4a5e285"
    rows: list[tuple[str, Any, bool]] = []
    if tool in (GET, FORGET):
        slot = ("record_id",)
        rows += [
            ("a well-formed record id that was never issued", "mem_" + body, True),
            ("record id of one base32 character", "mem_a", True),
            ("uppercase body", "mem_" + body.upper(), False),
            ("uppercase prefix", "MEM_" + body, False),
            ("digit 0 (outside base32)", "mem_" + body[:-1] + "0", False),
            ("digit 1 (outside base32)", "mem_" + body[:-1] + "1", False),
            ("digit 8 (outside base32)", "mem_" + body[:-1] + "8", False),
            ("digit 9 (outside base32)", "mem_" + body[:-1] + "9", False),
            ("no mem_ prefix", body, False),
            ("a trailing newline", "mem_" + body + "\n", False),
            ("base32 padding", "mem_" + body + "====", False),
            ("a candidate_id in place of a record_id", "candidate_" + hexpart, False),
            ("an integer", 7, False),
        ]
    elif tool in (ADMIT, WITHDRAW):
        slot = ("candidate_id",)
        rows += [
            ("a well-formed candidate id that was never issued", "candidate_" + hexpart, True),
            ("uppercase hex", "candidate_" + hexpart.upper(), False),
            ("63 hex digits", "candidate_" + hexpart[:-1], False),
            ("65 hex digits", "candidate_" + hexpart + "0", False),
            ("no candidate_ prefix", hexpart, False),
            ("a trailing newline", "candidate_" + hexpart + "\n", False),
            ("a record_id in place of a candidate_id", "mem_" + body, False),
            ("an integer", 7, False),
        ]
    else:
        return []
    return [judged(FAMILY, tool, f"{slot[0]}: {label}", put(base, slot, value), now=now, intent=intent)
            for label, value, intent in rows]
