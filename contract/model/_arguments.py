"""Which answers the contract allows to a call's arguments, where this project's schemas say more than it.

The argument oracle (``engram_mcp.contract.validation``) judges arguments against this project's bundled
schemas and rules, which pin choices the contract leaves open. For each such choice this module says what
the contract alone allows, and names the profile requirement that narrows it:

- EMC-ENC-015: a ``candidate_id`` is ``candidate_`` and 64 lowercase hex digits. The contract calls the id
  opaque, so any other non-empty string is a valid id that names nothing (INVALID_SCHEMA stays allowed: a
  server knows its own ids' form).
- EMC-SRCH-014: a sent ``capability_policy`` carries both members. The contract gives each a default.
- EMC-HP-050: a ``page_cursor`` is at most page_cursor.max_bytes. The contract sets no bound.
- EMC-ENC-014 and EMC-ENC-011: a malformed digest is INVALID_DIGEST, and INVALID_SCHEMA wins when both occur.
  The contract gives both codes one row ("INVALID_SCHEMA, INVALID_DIGEST — Corrige los argumentos").
- EMC-CAP-017: family_refs are sorted in UTF-16 code-unit order. "ordenados" names no order; code-point order
  differs only when characters beyond U+FFFF meet ones from U+E000 to U+FFFF.
- EMC-ENC-013: the size is measured on the canonical form. "El objeto de argumento serializado" names no
  serialisation; one that escapes non-ASCII text is larger, so near the limit a refusal is allowed too.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from engram_mcp.contract._loader import load
from engram_mcp.contract.validation import ArgumentOracle, serialized_size, utf16_key

CANDIDATE_PIN, POLICY_PIN, CURSOR_PIN = "EMC-ENC-015", "EMC-SRCH-014", "EMC-HP-050"
DIGEST_CODE_PIN, PRECEDENCE_PIN = "EMC-ENC-014", "EMC-ENC-011"
ORDER_PIN, SIZE_PIN = "EMC-CAP-017", "EMC-ENC-013"
CANDIDATE_TOOLS = ("engram_memory_request_admission", "engram_memory_withdraw")
SEARCH, CAPTURE = "engram_memory_search", "engram_memory_capture"
ACCEPTED = None  # in an allowed set: the arguments are valid, the call is judged on what it asks


@cache
def _oracle() -> ArgumentOracle:
    return ArgumentOracle()


@cache
def _forms() -> tuple[re.Pattern[str], dict[str, Any], int, int]:
    contract = load()
    candidate = contract.advertised_input_schema(CANDIDATE_TOOLS[0])["properties"]["candidate_id"]["pattern"]
    policy = contract.advertised_input_schema(SEARCH)["properties"]["capability_policy"]["default"]
    return (re.compile(candidate.removeprefix("^").removesuffix("$")), dict(policy),
            contract.limit("page_cursor.max_bytes"), contract.limit("arguments.max_bytes"))


WELL_FORMED_CANDIDATE = "candidate_" + "0" * 64
WELL_FORMED_CURSOR = "c"


def _lone_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def relaxed(tool: str, arguments: Any, *, any_text: bool = False) -> tuple[Any, tuple[str, ...]]:
    """The arguments with every value only a pin refuses made acceptable to it, and the pins that took.

    A candidate_id is replaced only when it is a non-empty string, and (unless ``any_text``, for judging
    schemas, which cannot see text rules) one free of lone surrogates, which a contract rule refuses anyway."""
    if not isinstance(arguments, dict):
        return arguments, ()
    form, default_policy, cursor_max, _ = _forms()
    out, pins = dict(arguments), []
    value = arguments.get("candidate_id")
    if (tool in CANDIDATE_TOOLS and isinstance(value, str) and value and not form.fullmatch(value)
            and (any_text or not _lone_surrogate(value))):
        out["candidate_id"] = WELL_FORMED_CANDIDATE
        pins.append(CANDIDATE_PIN)
    policy = arguments.get("capability_policy")
    if tool == SEARCH and isinstance(policy, dict) and not set(default_policy) <= set(policy):
        out["capability_policy"] = {**default_policy, **policy}
        pins.append(POLICY_PIN)
    cursor = arguments.get("page_cursor")
    if tool == SEARCH and isinstance(cursor, str) and len(cursor.encode("utf-8", "surrogatepass")) > cursor_max \
            and (any_text or not _lone_surrogate(cursor)):
        out["page_cursor"] = WELL_FORMED_CURSOR
        pins.append(CURSOR_PIN)
    return out, tuple(pins)


@dataclass(frozen=True)
class ArgumentVerdict:
    """The oracle's verdict (this project's profile) beside what the contract alone allows.

    ``allowed`` holds error codes, and ``ACCEPTED`` (None) when the arguments are valid at the contract level;
    ``pins`` are the profile requirements that narrow ``allowed`` to the oracle's verdict."""

    valid: bool
    code: str | None
    rules: frozenset[str]
    allowed: frozenset[str | None]
    pins: tuple[str, ...] = ()

    @property
    def contract_valid(self) -> bool:
        return ACCEPTED in self.allowed


def judge_arguments(tool: str, arguments: Any) -> ArgumentVerdict:
    """The verdict on a call's arguments, without the clock rules (the model judges those with the clock)."""
    verdict = _oracle().verdict(tool, arguments)
    rules = verdict.rules
    if verdict.valid:
        pins = _valid_but_pinned(tool, arguments)
        return ArgumentVerdict(True, None, rules, frozenset({ACCEPTED, "INVALID_SCHEMA"}) if pins
                               else frozenset({ACCEPTED}), pins)
    code = verdict.code
    if "digest_format" in rules:  # one row of the error table holds both codes
        pin = DIGEST_CODE_PIN if code == "INVALID_DIGEST" else PRECEDENCE_PIN
        return ArgumentVerdict(False, code, rules, frozenset({"INVALID_SCHEMA", "INVALID_DIGEST"}), (pin,))
    if rules <= {"schema_keyword", "utf8_bytes"}:  # a cursor's byte bound is this profile's too
        loose, pins = relaxed(tool, arguments)
        if pins and _oracle().verdict(tool, loose).valid:
            return ArgumentVerdict(False, code, rules, frozenset({ACCEPTED, code}), pins)
    if rules == {"family_refs_sorted"} and _sorted_by_code_point(arguments):
        return ArgumentVerdict(False, code, rules, frozenset({ACCEPTED, code}), (ORDER_PIN,))
    return ArgumentVerdict(False, code, rules, frozenset({code}))


def _family_refs(arguments: Any) -> list[Any]:
    payload = arguments.get("payload") if isinstance(arguments, Mapping) else None
    reconciliation = payload.get("reconciliation") if isinstance(payload, Mapping) else None
    refs = reconciliation.get("family_refs") if isinstance(reconciliation, Mapping) else None
    return refs if isinstance(refs, list) else []


def _sorted_by_code_point(arguments: Any) -> bool:
    refs = _family_refs(arguments)
    return all(isinstance(r, str) for r in refs) and all(a < b for a, b in itertools.pairwise(refs))


def _valid_but_pinned(tool: str, arguments: Any) -> tuple[str, ...]:
    """Valid by the profile, but refusable by another reading the contract allows."""
    pins: list[str] = []
    refs = _family_refs(arguments)
    if refs and all(isinstance(r, str) for r in refs) and sorted(refs) != sorted(refs, key=utf16_key):
        pins.append(ORDER_PIN)
    _, _, _, size_max = _forms()
    if tool == CAPTURE and serialized_size(arguments) > size_max // 2:
        escaped = len(json.dumps(arguments, ensure_ascii=True, separators=(",", ":"), sort_keys=True).encode())
        if escaped > size_max:
            pins.append(SIZE_PIN)
    return tuple(pins)
