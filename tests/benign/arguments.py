"""Benign variants: arguments, in readings the contract leaves open. Each server judges one argument rule its own
way: the size bound measured on ASCII-escaped JSON, a malformed digest refused INVALID_SCHEMA, family_refs ordered by
code point, page cursors without an upper bound.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import mcp_types as types

from engram_mcp.contract.validation import Verdict, Violation
from tests.benign.catalog import CAPTURE, CONTRACT, SEARCH, judge_arguments, variant
from tests.faulty.catalog import verdict_of
from tests.variant_server import Seams

ARGUMENTS_MAX = CONTRACT.limit("arguments.max_bytes")


def escaped_size(arguments: Any) -> int:
    """The length of the arguments as compact JSON with every non-ASCII character escaped, keys sorted."""
    return len(json.dumps(arguments, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode("ascii"))


@variant("size-measured-escaped", freedom="EMC-ENC-005: 'El objeto de argumento serializado tiene como máximo "
         "1.048.576 bytes UTF-8' names no serialisation")
def size_measured_escaped(seams: Seams) -> None:
    """The argument size bound is measured on compact ASCII-escaped JSON, so non-ASCII text weighs more."""
    code = CONTRACT.rules["arguments_size"].code

    def change(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
        if escaped_size(arguments) > ARGUMENTS_MAX:
            return verdict_of([Violation("arguments_size", code, "")])
        return verdict

    judge_arguments(seams, change)


def _digest_as_schema(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
    if verdict.code != "INVALID_DIGEST":
        return verdict
    return Verdict(tuple(Violation(v.rule, "INVALID_SCHEMA", v.path) for v in verdict.violations), "INVALID_SCHEMA")


@variant("digest-invalid-schema", freedom="EMC-ENC-007: INVALID_SCHEMA and INVALID_DIGEST share one row of the "
         "error table")
def digest_invalid_schema(seams: Seams) -> None:
    """A malformed digest is refused INVALID_SCHEMA, never INVALID_DIGEST."""
    judge_arguments(seams, _digest_as_schema)


def _family_refs(arguments: Any) -> list[Any]:
    payload = arguments.get("payload") if isinstance(arguments, dict) else None
    reconciliation = payload.get("reconciliation") if isinstance(payload, dict) else None
    refs = reconciliation.get("family_refs") if isinstance(reconciliation, dict) else None
    return refs if isinstance(refs, list) else []


@variant("family-refs-code-point-order", freedom="EMC-CAP-011: family_refs are 'ordenados', in no named order")
def family_refs_code_point_order(seams: Seams) -> None:
    """reconciliation.family_refs must ascend strictly in Unicode code-point order, not UTF-16 code-unit order."""
    code = CONTRACT.rules["family_refs_sorted"].code

    def change(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
        if tool != CAPTURE or any(v.rule in ("unicode_scalars", "arguments_size") for v in verdict.violations):
            return verdict  # judged before anything else, and alone
        kept = [v for v in verdict.violations if v.rule != "family_refs_sorted"]
        refs = _family_refs(arguments)
        kept += [Violation("family_refs_sorted", code, f"/payload/reconciliation/family_refs/{i}")
                 for i in range(1, len(refs))
                 if isinstance(refs[i - 1], str) and isinstance(refs[i], str) and refs[i - 1] >= refs[i]]
        return verdict_of(kept)

    judge_arguments(seams, change)


CURSOR_MAX = CONTRACT.limit("page_cursor.max_bytes")


def _cursor_unbounded(tool: str, arguments: Any, verdict: Verdict) -> Verdict:
    cursor = arguments.get("page_cursor") if tool == SEARCH and isinstance(arguments, dict) else None
    if not isinstance(cursor, str) or len(cursor.encode("utf-8", "surrogatepass")) <= CURSOR_MAX:
        return verdict
    # A long string breaks only the bound (its type and minimum hold): those are the violations dropped.
    return verdict_of([v for v in verdict.violations
                       if not (v.path == "/page_cursor" and v.rule in ("schema_keyword", "utf8_bytes"))])


def _unbounded_schema(name: str, tool: types.Tool) -> types.Tool:
    if name != SEARCH:
        return tool
    schema = copy.deepcopy(tool.input_schema)
    cursor = schema["properties"]["page_cursor"]
    cursor.pop("maxLength", None)
    cursor.get("x-utf8Bytes", {}).pop("maximum", None)
    return tool.model_copy(update={"input_schema": schema})


@variant("long-cursors", freedom="EMC-HOST-002 asks for closed schemas; the page_cursor byte bound is this "
         "project's (EMC-HP-050)")
def long_cursors(seams: Seams) -> None:
    """page_cursor has no upper bound: an overlong one is not refused INVALID_SCHEMA but answered STALE_PAGE."""
    judge_arguments(seams, _cursor_unbounded)
    seams.retool(_unbounded_schema)
