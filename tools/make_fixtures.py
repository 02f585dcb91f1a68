#!/usr/bin/env python3
"""Build the fixture files under fixtures/ from this one readable description.

    python tools/make_fixtures.py          write fixtures/arguments/*.json and fixtures/digests.json
    python tools/make_fixtures.py --check  exit 1 when the files on disk differ from what is built here

fixtures/arguments/<tool>.json holds argument cases in the style of
JSON-Schema-Test-Suite: each case is valid, or invalid with the error code a
server must send and the set of rule ids (spec/rules.json) the arguments break;
a case whose verdict only a pin decides names it under "pins": the contract alone allows another
answer there (engram_mcp.contract.model judges which).
Some cases are a mebibyte long, so the files are generated rather than
hand-edited; read this file instead of the megabytes.

Every expectation here is written by hand from the contract (the section each
case cites) and from spec/rules.json. Nothing in this file asks the argument
oracle: tests/test_fixtures.py compares the two.

Besides the contract data, the only project code used is the fuzzer's
vocabulary and path helpers (engram_mcp.conformance._fuzz.vocabulary and
.paths: tool names, characters, copies edited at a path), which use the
standard library alone; so the output does not depend on the project's own
canonical-JSON or digest code either.
"""

# The corpus is data written one case to a line, which reads better than wrapped calls;
# each tool's cases stay in one function so that they read in the order they are written.
# ruff: noqa: E501, PLR0915 - a case to a line, and a tool's cases in one function

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engram_mcp.conformance._fuzz.paths import drop, edit, put, rename
from engram_mcp.conformance._fuzz.paths import label_of as label
from engram_mcp.conformance._fuzz.vocabulary import (
    ADMIT,
    ANGSTROM,
    C1,
    C2,
    C3,
    C4,
    CAPTURE,
    FORGET,
    GET,
    JAMO,
    NFD_E,
    SEARCH,
    WITHDRAW,
)
from engram_mcp.conformance._fuzz.vocabulary import DIGEST_A as A
from engram_mcp.conformance._fuzz.vocabulary import DIGEST_B as B
from engram_mcp.contract import load
from engram_mcp.contract.model import judge_arguments

ROOT = Path(__file__).resolve().parents[1]

# Rule codes come from the contract data; the verdicts below are written by
# hand, independently of the argument oracle they test.
CONTRACT = load()
RULE_CODES: dict[str, str] = {rule.id: rule.code for rule in CONTRACT.rules.values()}
PRECEDENCE: list[str] = list(CONTRACT.code_precedence)

# Boundary values are stated here as data, like every value in the corpus, so
# that the corpus checks the schemas and limits rather than echoing them.
ARGUMENTS_MAX_BYTES = 1_048_576
MAX_SAFE = 2**53 - 1
NOW = "2026-08-16T12:34:56.789Z"  # the capture time given to clock rules
RECORD_ID = "mem_y5lyhrr2w42rak7rz6h3gypy53rhohj2zszdhj7gpqzvjnijiqkq"  # record id of the golden record
CANDIDATE_ID = "candidate_7c2147c69a1394198962533640d865bc4f2fdf8f6b1e753e8ad28856d4a5e285"

# Pins (spec/requirements.json, source "pin") that some invalid cases rest on alone: a
# server true to the contract but not to this profile may answer those cases otherwise.
CANDIDATE_PIN = "EMC-ENC-015"  # candidate_id's form; the contract calls the id opaque
POLICY_PIN = "EMC-SRCH-014"  # both capability_policy members; the contract gives each a default

HOST_OWNED: dict[str, Any] = {
    "tenant": "tenant:acme",
    "workspace": "workspace:main",
    "scope": "scope:case-7",
    "principal": "principal:alice",
    "agent_id": "agent:reviewer",
    "session": "session:0001",
    "credential": "Bearer example-token",
    "auditId": "audit:0001",
    "deadline": "2026-08-16T12:35:26.789Z",
    "cancellation": "cancel:0001",
    "confirmation": {"approved": True},
    "confirmed": True,
    "elicitationRef": "elicitation:0001",
}


# -- building cases -------------------------------------------------------


def code_for(breaks: Iterable[str]) -> str:
    codes = {RULE_CODES[rule] for rule in breaks}
    return next(code for code in PRECEDENCE if code in codes)


def _has_expiry(arguments: Any) -> bool:
    try:
        return isinstance(arguments["payload"]["retention"]["expires_at"], str)
    except (KeyError, TypeError):
        return False


class Cases:
    """The cases of one tool, in the order they are added."""

    def __init__(self, tool: str, section: str) -> None:
        self.tool = tool
        self.section = section
        self.cases: list[dict[str, Any]] = []
        self._seen: set[str] = set()

    def ok(self, description: str, arguments: Any, *, section: str | None = None, now: str | None = None) -> None:
        self._add(description, arguments, None, section, now)

    def bad(
        self,
        description: str,
        arguments: Any,
        breaks: Iterable[str],
        *,
        section: str | None = None,
        now: str | None = None,
        pins: Iterable[str] = (),
    ) -> None:
        breaks = sorted(set(breaks))
        assert breaks, description
        self._add(description, arguments, breaks, section, now, sorted(set(pins)))

    def _add(
        self, description: str, arguments: Any, breaks: list[str] | None, section: str | None, now: str | None, pins: list[str] | None = None
    ) -> None:
        assert description not in self._seen, f"duplicate description: {description}"
        self._seen.add(description)
        # A capture carrying retention.expires_at is judged at a known capture time.
        if now is None and self.tool == CAPTURE and _has_expiry(arguments):
            now = NOW
        case: dict[str, Any] = {"description": description, "section": section or self.section, "valid": breaks is None}
        if breaks is not None:
            case["code"] = code_for(breaks)
            case["breaks"] = breaks
        pins = sorted(set(pins or ()) | set(_pins_of(self.tool, arguments)))
        if pins:
            case["pins"] = pins
        if now is not None:
            case["now"] = now
        case["arguments"] = copy.deepcopy(arguments)
        self.cases.append(case)

    def document(self) -> dict[str, Any]:
        return {"tool": self.tool, "cases": self.cases}


def _pins_of(tool: str, arguments: Any) -> tuple[str, ...]:
    """The pins a case's verdict rests on, as the contract model judges them."""
    try:
        return judge_arguments(tool, arguments).pins
    except (TypeError, ValueError, UnicodeError):  # arguments no canonical form holds: the contract refuses them
        return ()


def jcs_size(value: Any) -> int:
    """UTF-8 length of the RFC 8785 form, for the integer-and-string data used here."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode("utf-8"))


# -- shared batteries -------------------------------------------------------


def opaque_ref_battery(cases: Cases, base: Any, path: tuple[Any, ...], *, full: bool = True) -> None:
    """§2 common encodings: an opaque reference is NFC text of 1 to 512 UTF-8 bytes."""
    name = label(path)
    sec = "§2 common encodings"
    cases.ok(f"{name} of 1 byte", put(base, path, C1), section=sec)
    cases.ok(f"{name} of 512 bytes of 4-byte characters (128 x U+1F600)", put(base, path, C4 * 128), section=sec)
    cases.bad(f"{name} of 513 bytes of 1-byte characters", put(base, path, C1 * 513), ["schema_keyword", "utf8_bytes"], section=sec)
    cases.bad(f"{name} in NFD (e + U+0301)", put(base, path, f"ref:caf{NFD_E}"), ["nfc"], section=sec)
    cases.bad(f"{name} holding a lone high surrogate U+D800", put(base, path, "ref:\ud800"), ["unicode_scalars"], section=sec)
    if not full:
        return
    cases.ok(f"{name} of one 2-byte character", put(base, path, C2), section=sec)
    cases.ok(f"{name} of one 3-byte character", put(base, path, C3), section=sec)
    cases.ok(f"{name} of one 4-byte character", put(base, path, C4), section=sec)
    cases.ok(f"{name} of 512 bytes of 1-byte characters", put(base, path, C1 * 512), section=sec)
    cases.ok(f"{name} of 512 bytes of 2-byte characters (256 x U+00E9)", put(base, path, C2 * 256), section=sec)
    cases.ok(f"{name} of 512 bytes of 3-byte characters (170 x U+20AC and 2 ASCII)", put(base, path, C3 * 170 + "ab"), section=sec)
    cases.ok(f"{name} in NFC (precomposed U+00E9)", put(base, path, f"ref:caf{C2}"), section=sec)
    cases.bad(f"{name} empty", put(base, path, ""), ["schema_keyword", "utf8_bytes"], section=sec)
    cases.bad(f"{name} of 513 bytes, 257 characters (256 x U+00E9 and 1 ASCII)", put(base, path, C2 * 256 + "a"), ["utf8_bytes"], section=sec)
    cases.bad(f"{name} of 513 bytes, 171 characters (171 x U+20AC)", put(base, path, C3 * 171), ["utf8_bytes"], section=sec)
    cases.bad(f"{name} of 513 bytes, 129 characters (128 x U+1F600 and 1 ASCII)", put(base, path, C4 * 128 + "a"), ["utf8_bytes"], section=sec)
    cases.bad(f"{name} holding U+212B ANGSTROM SIGN (not NFC)", put(base, path, f"ref:{ANGSTROM}"), ["nfc"], section=sec)
    cases.bad(f"{name} holding decomposed Hangul jamo (not NFC)", put(base, path, f"ref:{JAMO}"), ["nfc"], section=sec)
    cases.bad(f"{name} holding a lone low surrogate U+DC00", put(base, path, "ref:\udc00"), ["unicode_scalars"], section=sec)
    cases.bad(f"{name} holding a reversed surrogate pair", put(base, path, "ref:\ude00\ud83d"), ["unicode_scalars"], section=sec)
    cases.bad(f"{name} as an integer", put(base, path, 7), ["schema_keyword"], section=sec)
    cases.bad(f"{name} as an array", put(base, path, ["ref:case"]), ["schema_keyword"], section=sec)


def idempotency_battery(cases: Cases, base: Any) -> None:
    """§3 item 5: NFC text of 16 to 256 UTF-8 bytes."""
    path = ("idempotency_key",)
    sec = "§3 item 5"
    valid = [
        ("idempotency_key of 16 ASCII bytes", "0123456789abcdef"),
        ("idempotency_key of 16 bytes: 4 x U+1F600 (4 characters)", C4 * 4),
        ("idempotency_key of 16 bytes: 8 x U+00E9", C2 * 8),
        ("idempotency_key of 16 bytes: 5 x U+20AC and 1 ASCII", C3 * 5 + "k"),
        ("idempotency_key of 256 ASCII bytes", "0123456789abcdef" * 16),
        ("idempotency_key of 256 bytes: 64 x U+1F600", C4 * 64),
        ("idempotency_key of 256 bytes: 128 x U+00E9", C2 * 128),
        ("idempotency_key in NFC with accents", f"cl{C2}-idempotence-0001"),
    ]
    for description, key in valid:
        cases.ok(description, put(base, path, key), section=sec)
    invalid: list[tuple[str, Any, list[str]]] = [
        ("idempotency_key of 15 ASCII bytes", "0123456789abcde", ["utf8_bytes"]),
        ("idempotency_key of 12 bytes: 3 x U+1F600 (3 characters, below minLength too)", C4 * 3, ["schema_keyword", "utf8_bytes"]),
        ("idempotency_key of 15 bytes: 5 x U+20AC (5 characters)", C3 * 5, ["utf8_bytes"]),
        ("idempotency_key of 14 bytes: 7 x U+00E9", C2 * 7, ["utf8_bytes"]),
        ("idempotency_key of 257 ASCII bytes", "0123456789abcdef" * 16 + "x", ["schema_keyword", "utf8_bytes"]),
        ("idempotency_key of 257 bytes: 64 x U+1F600 and 1 ASCII (65 characters)", C4 * 64 + "x", ["utf8_bytes"]),
        ("idempotency_key of 258 bytes: 129 x U+00E9", C2 * 129, ["utf8_bytes"]),
        ("idempotency_key empty", "", ["schema_keyword", "utf8_bytes"]),
        ("idempotency_key in NFD (e + U+0301)", f"cl{NFD_E}-idempotence-0001", ["nfc"]),
        ("idempotency_key holding U+212B ANGSTROM SIGN", f"idempotency-{ANGSTROM}-0001", ["nfc"]),
        ("idempotency_key holding a lone surrogate", "idempotency-key-\ud800", ["unicode_scalars"]),
        ("idempotency_key as an integer", 1234567890123456, ["schema_keyword"]),
    ]
    for description, key, breaks in invalid:
        cases.bad(description, put(base, path, key), breaks, section=sec)


def host_owned_battery(cases: Cases, base: dict[str, Any]) -> None:
    """§0: host-owned context never travels in the arguments; each schema is closed."""
    for name, value in HOST_OWNED.items():
        cases.bad(f"host-owned field {name} at the top level", put(base, (name,), value), ["closed_schema"], section="§0")
    cases.bad("unknown field at the top level", put(base, ("extra",), "value"), ["closed_schema"], section="§0")
    cases.bad("unknown field with a null value at the top level", put(base, ("extra",), None), ["closed_schema"], section="§0")
    cases.bad("host-owned field with a null value (tenant: null)", put(base, ("tenant",), None), ["closed_schema"], section="§0")


def root_shape_battery(cases: Cases, base: dict[str, Any], required: list[str], side: dict[str, list[str]] | None = None) -> None:
    """Null for every member, each required member missing, non-object arguments."""
    side = side or {}
    for name in base:
        cases.bad(f"{name} is null", put(base, (name,), None), ["schema_keyword", *side.get(name, [])], section="§0")
    for name in required:
        cases.bad(f"{name} missing", drop(base, (name,)), ["schema_keyword", *side.get(name, [])])
    cases.bad("arguments are an empty object", {}, ["schema_keyword"])
    cases.bad("arguments are null", None, ["schema_keyword"])
    cases.bad("arguments are an array", [copy.deepcopy(base)], ["schema_keyword"])
    cases.bad("arguments are a string", json.dumps(base), ["schema_keyword"])
    cases.bad("object key holding a lone surrogate", put(base, ("x-\ud800",), "value"), ["unicode_scalars"], section="§2 common encodings")
    cases.bad(
        "lone surrogate and an unknown field together: only the unencodable text is reported",
        put(put(base, ("extra",), "value"), ("x-\udfff",), "value"),
        ["unicode_scalars"],
        section="§2 common encodings",
    )


def oversize(base: dict[str, Any], path: tuple[Any, ...], prefix: str, fill: str = "x") -> dict[str, Any]:
    """base with the string at path padded so the canonical arguments are one byte over the limit."""
    args = put(base, path, prefix)
    args = put(args, path, prefix + fill * (ARGUMENTS_MAX_BYTES + 1 - jcs_size(args)))
    assert jcs_size(args) == ARGUMENTS_MAX_BYTES + 1
    return args


def record_id_battery(cases: Cases, base: dict[str, Any], section: str) -> None:
    """record_id matches ^mem_[a-z2-7]+$ and is copied exactly as returned."""
    path = ("record_id",)
    body = RECORD_ID.removeprefix("mem_")
    cases.ok("record_id of the golden record", put(base, path, RECORD_ID), section=section)
    cases.ok("record_id of an all-zero digest (mem_ and 52 x a)", put(base, path, "mem_" + "a" * 52), section=section)
    cases.ok("record_id using the whole base32 alphabet", put(base, path, "mem_abcdefghijklmnopqrstuvwxyz234567"), section=section)
    cases.ok("record_id with a one-character body", put(base, path, "mem_a"), section=section)
    near_misses = [
        ("record_id with an uppercase body", "mem_" + body.upper()),
        ("record_id with an uppercase prefix", "MEM_" + body),
        ("record_id with one uppercase letter", "mem_" + body[:-1] + body[-1].upper()),
        ("record_id holding digit 0", "mem_" + body[:-1] + "0"),
        ("record_id holding digit 1", "mem_" + body[:-1] + "1"),
        ("record_id holding digit 8", "mem_" + body[:-1] + "8"),
        ("record_id holding digit 9", "mem_" + body[:-1] + "9"),
        ("record_id without the mem_ prefix", body),
        ("record_id with a hyphen instead of the underscore", "mem-" + body),
        ("record_id with an empty body", "mem_"),
        ("record_id with a trailing newline", RECORD_ID + "\n"),
        ("record_id with a leading space", " " + RECORD_ID),
        ("record_id with base32 padding", RECORD_ID + "===="),
        ("record_id holding a non-ASCII letter", "mem_" + body[:-1] + C2),
        ("a candidate_id in the record_id slot", CANDIDATE_ID),
        ("a digest in the record_id slot", A),
        ("record_id as an integer", 7),
    ]
    for description, value in near_misses:
        cases.bad(description, put(base, path, value), ["schema_keyword"], section=section)


def candidate_id_battery(cases: Cases, base: dict[str, Any], section: str) -> None:
    """candidate_id is 'candidate_' and 64 lowercase hex digits, copied exactly as capture returned it."""
    path = ("candidate_id",)
    hexpart = CANDIDATE_ID.removeprefix("candidate_")
    cases.ok("candidate_id of the derived capture identity", put(base, path, CANDIDATE_ID), section=section)
    cases.ok("candidate_id of 64 zero digits", put(base, path, "candidate_" + "0" * 64), section=section)
    cases.ok("candidate_id of 64 f digits", put(base, path, "candidate_" + "f" * 64), section=section)
    near_misses = [
        ("candidate_id with uppercase hex", "candidate_" + hexpart.upper()),
        ("candidate_id with an uppercase prefix", "CANDIDATE_" + hexpart),
        ("candidate_id with 63 hex digits", "candidate_" + hexpart[:-1]),
        ("candidate_id with 65 hex digits", "candidate_" + hexpart + "0"),
        ("candidate_id with a non-hex digit", "candidate_" + hexpart[:-1] + "g"),
        ("candidate_id with a hyphen instead of the underscore", "candidate-" + hexpart),
        ("candidate_id without the prefix", hexpart),
        ("candidate_id with a sha256: prefix", "sha256:" + hexpart),
        ("candidate_id with a trailing newline", CANDIDATE_ID + "\n"),
        ("candidate_id with a leading space", " " + CANDIDATE_ID),
        ("a record_id in the candidate_id slot", RECORD_ID),
        ("candidate_id as an integer", 7),
    ]
    for description, value in near_misses:
        # The contract calls the id opaque: only this project's form (EMC-ENC-015) refuses a non-empty string.
        pins = [CANDIDATE_PIN] if isinstance(value, str) and value else []
        cases.bad(description, put(base, path, value), ["schema_keyword"], section=section, pins=pins)


# -- search ------------------------------------------------------------------


def search_cases() -> Cases:
    cases = Cases(SEARCH, "§2 search")
    base = {"query": "documented correction", "purpose_ref": "purpose:case"}
    maximal = {
        **base,
        "limit": 20,
        "max_packet_bytes": 131072,
        "capability_policy": {"minimum_channels": "lexical", "network": "forbid"},
        "page_cursor": "eyJvZmZzZXQiOjEwfQ",
    }
    cases.ok("minimal: query and purpose_ref", base)
    cases.ok("maximal: every optional field", maximal)
    cases.ok("limit at its minimum 1", put(base, ("limit",), 1))
    cases.ok("limit at its maximum 50", put(base, ("limit",), 50))
    cases.ok("limit at its default 10", put(base, ("limit",), 10))
    cases.ok("limit 10.0: a number with a zero fraction is an integer", put(base, ("limit",), 10.0))
    cases.ok("max_packet_bytes at its minimum 4096", put(base, ("max_packet_bytes",), 4096))
    cases.ok("max_packet_bytes at its maximum 1048576", put(base, ("max_packet_bytes",), 1048576))
    cases.ok("max_packet_bytes at its default 65536", put(base, ("max_packet_bytes",), 65536))
    for channels in ("lexical", "lexical_and_semantic"):
        for network in ("forbid", "allow"):
            cases.ok(
                f"capability_policy {channels} / {network}",
                put(base, ("capability_policy",), {"minimum_channels": channels, "network": network}),
            )
    cases.ok("query of 1 byte", put(base, ("query",), "q"))
    cases.ok("query of one 4-byte character", put(base, ("query",), C4))
    cases.ok("query of 8192 ASCII bytes", put(base, ("query",), "q" * 8192))
    cases.ok("query of 8192 bytes: 4096 x U+00E9", put(base, ("query",), C2 * 4096))
    cases.ok("query of 8192 bytes: 2730 x U+20AC and 2 ASCII", put(base, ("query",), C3 * 2730 + "qq"))
    cases.ok("query of 8192 bytes: 2048 x U+1F600", put(base, ("query",), C4 * 2048))
    cases.ok("query in NFD: free text need not be NFC", put(base, ("query",), f"d{NFD_E}cision document{NFD_E}e"), section="§2 common encodings")
    cases.ok("query holding line breaks, tabs and quotes", put(base, ("query",), 'line one\nline\t"two"\\'))
    cases.ok("page_cursor of 1 byte", put(base, ("page_cursor",), "c"))
    cases.ok("page_cursor of 4096 ASCII bytes", put(base, ("page_cursor",), "c" * 4096))
    cases.ok("page_cursor of 4096 bytes: 1024 x U+1F600", put(base, ("page_cursor",), C4 * 1024))
    cases.ok("page_cursor in NFD: cursors are copied exactly, not normalised", put(base, ("page_cursor",), f"cursor-{NFD_E}"))

    cases.bad("query empty", put(base, ("query",), ""), ["schema_keyword", "utf8_bytes"])
    cases.bad("query of 8193 ASCII bytes", put(base, ("query",), "q" * 8193), ["schema_keyword", "utf8_bytes"])
    cases.bad("query of 8196 bytes: 2049 x U+1F600", put(base, ("query",), C4 * 2049), ["utf8_bytes"])
    cases.bad("query of 8193 bytes: 2048 x U+1F600 and 1 ASCII", put(base, ("query",), C4 * 2048 + "q"), ["utf8_bytes"])
    cases.bad("query of 8193 bytes: 4096 x U+00E9 and 1 ASCII", put(base, ("query",), C2 * 4096 + "q"), ["utf8_bytes"])
    cases.bad("query holding a lone surrogate", put(base, ("query",), "find \ud800 this"), ["unicode_scalars"], section="§2 common encodings")
    cases.bad("query as an array of words", put(base, ("query",), ["documented", "correction"]), ["schema_keyword"])
    for value, what in ((0, "0"), (51, "51"), (-1, "-1"), (1.5, "1.5"), ("10", "the string 10"), (True, "true")):
        cases.bad(f"limit {what}", put(base, ("limit",), value), ["schema_keyword"])
    cases.bad("limit 2^53, beyond the safe integers", put(base, ("limit",), 2**53), ["schema_keyword"])
    for value, what in ((4095, "4095"), (1048577, "1048577"), (65536.5, "65536.5"), ("65536", "the string 65536"), (0, "0")):
        cases.bad(f"max_packet_bytes {what}", put(base, ("max_packet_bytes",), value), ["schema_keyword"])
    policy = ("capability_policy",)
    # The contract gives each member a default: only this project (EMC-SRCH-014) requires both.
    cases.bad("capability_policy empty", put(base, policy, {}), ["schema_keyword"], pins=[POLICY_PIN])
    cases.bad("capability_policy without network", put(base, policy, {"minimum_channels": "lexical"}), ["schema_keyword"], pins=[POLICY_PIN])
    cases.bad("capability_policy without minimum_channels", put(base, policy, {"network": "forbid"}), ["schema_keyword"], pins=[POLICY_PIN])
    cases.bad("capability_policy.minimum_channels semantic", put(base, policy, {"minimum_channels": "semantic", "network": "forbid"}), ["schema_keyword"])
    cases.bad("capability_policy.minimum_channels in another case", put(base, policy, {"minimum_channels": "Lexical", "network": "forbid"}), ["schema_keyword"])
    cases.bad("capability_policy.network deny", put(base, policy, {"minimum_channels": "lexical", "network": "deny"}), ["schema_keyword"])
    cases.bad("capability_policy.minimum_channels null", put(base, policy, {"minimum_channels": None, "network": "forbid"}), ["schema_keyword"], section="§0")
    cases.bad("capability_policy.network null", put(base, policy, {"minimum_channels": "lexical", "network": None}), ["schema_keyword"], section="§0")
    cases.bad(
        "unknown field in capability_policy",
        put(base, policy, {"minimum_channels": "lexical", "network": "forbid", "timeout_ms": 500}),
        ["closed_schema"],
        section="§0",
    )
    cases.bad(
        "host-owned field in capability_policy (credential)",
        put(base, policy, {"minimum_channels": "lexical", "network": "allow", "credential": "Bearer example-token"}),
        ["closed_schema"],
        section="§0",
    )
    cases.bad("capability_policy as a string", put(base, policy, "lexical"), ["schema_keyword"])
    cases.bad("page_cursor empty", put(base, ("page_cursor",), ""), ["schema_keyword", "utf8_bytes"])
    cases.bad("page_cursor of 4097 ASCII bytes", put(base, ("page_cursor",), "c" * 4097), ["schema_keyword", "utf8_bytes"])
    cases.bad("page_cursor of 4097 bytes: 1024 x U+1F600 and 1 ASCII", put(base, ("page_cursor",), C4 * 1024 + "c"), ["utf8_bytes"])
    cases.bad("page_cursor as an integer", put(base, ("page_cursor",), 10), ["schema_keyword"])
    cases.bad("scope selector in the arguments (scope_ref)", put(base, ("scope_ref",), "scope:case-7"), ["closed_schema"], section="§0")

    opaque_ref_battery(cases, base, ("purpose_ref",))
    host_owned_battery(cases, base)
    root_shape_battery(cases, maximal, ["query", "purpose_ref"])
    cases.bad(
        "arguments of 1048577 canonical bytes (an overlong query): the size is judged before the fields",
        oversize(base, ("query",), "q"),
        ["arguments_size"],
        section="§2 common encodings",
    )
    return cases


# -- get ---------------------------------------------------------------------


def get_cases() -> Cases:
    cases = Cases(GET, "§2 get")
    base = {"record_id": RECORD_ID, "purpose_ref": "purpose:case"}
    maximal = {**base, "max_packet_bytes": 65536}
    cases.ok("minimal: record_id and purpose_ref", base)
    cases.ok("maximal: every optional field", maximal)
    cases.ok("max_packet_bytes at its minimum 4096", put(base, ("max_packet_bytes",), 4096))
    cases.ok("max_packet_bytes at its maximum 1048576", put(base, ("max_packet_bytes",), 1048576))
    cases.ok("max_packet_bytes 4096.0: a number with a zero fraction is an integer", put(base, ("max_packet_bytes",), 4096.0))
    for value, what in ((4095, "4095"), (1048577, "1048577"), (4096.5, "4096.5"), ("65536", "the string 65536"), (-65536, "-65536")):
        cases.bad(f"max_packet_bytes {what}", put(base, ("max_packet_bytes",), value), ["schema_keyword"])
    cases.bad("max_packet_bytes 2^53, beyond the safe integers", put(base, ("max_packet_bytes",), 2**53), ["schema_keyword"])
    record_id_battery(cases, base, "§2 get")
    cases.bad("record_id holding a lone surrogate", put(base, ("record_id",), "mem_a\ud800"), ["unicode_scalars"], section="§2 common encodings")
    cases.bad("a candidate_id as record_id beside a host-owned tenant field", put(put(base, ("record_id",), CANDIDATE_ID), ("tenant",), "tenant:other"), ["schema_keyword", "closed_schema"], section="§0")
    opaque_ref_battery(cases, base, ("purpose_ref",))
    host_owned_battery(cases, base)
    root_shape_battery(cases, maximal, ["record_id", "purpose_ref"])
    cases.bad(
        "arguments of 1048577 canonical bytes (an overlong record_id): the size is judged before the fields",
        oversize(base, ("record_id",), "mem_", "a"),
        ["arguments_size"],
        section="§2 common encodings",
    )
    return cases


# -- request_admission, withdraw, forget ---------------------------------------


def admission_cases() -> Cases:
    cases = Cases(ADMIT, "§2 request_admission")
    base = {"candidate_id": CANDIDATE_ID, "idempotency_key": "admission-key-0001"}
    cases.ok("minimal and maximal: candidate_id and idempotency_key", base)
    candidate_id_battery(cases, base, "§2 request_admission")
    cases.bad("candidate_id holding a lone surrogate", put(base, ("candidate_id",), "candidate_\ud800"), ["unicode_scalars"], section="§2 common encodings")
    idempotency_battery(cases, base)
    cases.bad("camelCase idempotencyKey instead of idempotency_key", {"candidate_id": CANDIDATE_ID, "idempotencyKey": "admission-key-0001"}, ["closed_schema", "schema_keyword"])
    cases.bad("a decision in the arguments (decision: accept)", put(base, ("decision",), "accept"), ["closed_schema"], section="§3 item 3")
    cases.bad("a record_id in the arguments", put(base, ("record_id",), RECORD_ID), ["closed_schema"])
    host_owned_battery(cases, base)
    root_shape_battery(cases, base, ["candidate_id", "idempotency_key"])
    cases.bad(
        "arguments of 1048577 canonical bytes (an overlong idempotency_key): the size is judged before the fields",
        oversize(base, ("idempotency_key",), "admission-key-"),
        ["arguments_size"],
        section="§2 common encodings",
    )
    return cases


def withdraw_cases() -> Cases:
    cases = Cases(WITHDRAW, "§2 withdraw")
    base = {"candidate_id": CANDIDATE_ID, "idempotency_key": "withdraw-key-0001", "reason_ref": "reason:superseded-draft"}
    cases.ok("minimal and maximal: candidate_id, idempotency_key and reason_ref", base)
    candidate_id_battery(cases, base, "§2 withdraw")
    idempotency_battery(cases, base)
    opaque_ref_battery(cases, base, ("reason_ref",))
    cases.bad("a record_id instead of a candidate_id (record_id field)", {"record_id": RECORD_ID, "idempotency_key": "withdraw-key-0001", "reason_ref": "reason:x"}, ["closed_schema", "schema_keyword"])
    host_owned_battery(cases, base)
    root_shape_battery(cases, base, ["candidate_id", "idempotency_key", "reason_ref"])
    cases.bad(
        "arguments of 1048577 canonical bytes (an overlong reason_ref): the size is judged before the fields",
        oversize(base, ("reason_ref",), "reason:"),
        ["arguments_size"],
        section="§2 common encodings",
    )
    return cases


def forget_cases() -> Cases:
    cases = Cases(FORGET, "§2 forget")
    base = {"record_id": RECORD_ID, "idempotency_key": "forget-key-0001-x", "reason_ref": "reason:owner-request"}
    cases.ok("minimal and maximal: record_id, idempotency_key and reason_ref", base)
    record_id_battery(cases, base, "§2 forget")
    idempotency_battery(cases, base)
    opaque_ref_battery(cases, base, ("reason_ref",))
    cases.bad("a candidate_id instead of a record_id (candidate_id field)", {"candidate_id": CANDIDATE_ID, "idempotency_key": "forget-key-0001-x", "reason_ref": "reason:x"}, ["closed_schema", "schema_keyword"])
    host_owned_battery(cases, base)
    root_shape_battery(cases, base, ["record_id", "idempotency_key", "reason_ref"])
    cases.bad(
        "arguments of 1048577 canonical bytes (an overlong reason_ref): the size is judged before the fields",
        oversize(base, ("reason_ref",), "reason:"),
        ["arguments_size"],
        section="§2 common encodings",
    )
    return cases


# -- capture -------------------------------------------------------------------

GOLDEN_PAYLOAD: dict[str, Any] = {
    "schema_version": 2,
    "scope_ref": "scope:case-7",
    "purpose_ref": "purpose:case",
    "valid_time": {"t": 1755350096789, "t_end": 1755350096789},
    "components": [
        {
            "component_id": "component:decision",
            "kind": "decision",
            "text": "Applied the documented correction.",
            "citation_ids": ["citation:source"],
        }
    ],
    "primary_component_id": "component:decision",
    "primary_event": {"at": 1755350096789, "type_ref": "event:correction-applied", "citation_id": "citation:source"},
    "citations": [
        {
            "citation_id": "citation:source",
            "source_ref": "source:case",
            "locator": {"scheme": "document", "value": "case-7#correction"},
            "content_digest": A,
            "observed_at": "2026-08-16T12:34:56.789Z",
        }
    ],
    "retention": {"derivative_rule": "make-ineligible"},
    "reconciliation": {"family_refs": []},
}
"""The upstream golden payload (payload_digest sha256:df5abcbf…e913), keys in upstream order."""


def golden_capture() -> dict[str, Any]:
    """The golden payload as MCP arguments: no scope_ref, as the host binds the scope."""
    payload = {key: value for key, value in copy.deepcopy(GOLDEN_PAYLOAD).items() if key != "scope_ref"}
    return {
        "idempotency_key": "idempotency-key-0001",
        "payload": payload,
        "evidence": {"evidence_ref": "evidence:opaque", "evidence_digest": A, "citation_ids": ["citation:source"]},
    }


def minimal_capture() -> dict[str, Any]:
    args = golden_capture()
    payload = args["payload"]
    del payload["retention"], payload["reconciliation"], payload["valid_time"]["t_end"]
    del payload["citations"][0]["observed_at"]
    return args


def citation(cid: str, source: str = "source:case", value: str = "case-7#correction", digest: str = A) -> dict[str, Any]:
    return {
        "citation_id": cid,
        "source_ref": source,
        "locator": {"scheme": "document", "value": value},
        "content_digest": digest,
        "observed_at": "2026-08-16T12:34:56.789Z",
    }


def maximal_capture() -> dict[str, Any]:
    """Every optional field present; three components of each kind, two citations."""
    return {
        "idempotency_key": "idempotency-key-0002",
        "payload": {
            "schema_version": 2,
            "purpose_ref": "purpose:case",
            "valid_time": {"t": 1755350096789, "t_end": 1755436496789},
            "components": [
                {
                    "component_id": "component:decision",
                    "kind": "decision",
                    "text": "Applied the documented correction.",
                    "citation_ids": ["citation:source", "citation:review"],
                },
                {
                    "component_id": "component:context",
                    "kind": "context",
                    "text": "The nightly export rounded totals before summing them.",
                    "citation_ids": ["citation:review"],
                },
                {
                    "component_id": "component:evidence",
                    "kind": "evidence",
                    "text": "The corrected totals match the ledger for August.",
                    "citation_ids": ["citation:source"],
                },
            ],
            "primary_component_id": "component:decision",
            "primary_event": {"at": 1755350096789, "type_ref": "event:correction-applied", "citation_id": "citation:source"},
            "citations": [citation("citation:source"), citation("citation:review", "source:review", "review-12#finding-3", B)],
            "retention": {"derivative_rule": "retain", "expires_at": "2027-08-16T12:34:56.789Z"},
            "reconciliation": {"family_refs": ["family:export-rounding", "family:ledger"]},
        },
        "evidence": {
            "evidence_ref": "evidence:opaque",
            "evidence_digest": B,
            "citation_ids": ["citation:review", "citation:source"],
            "attestation": "Reviewed against the August ledger by the finance owner.",
        },
    }


def many_citations(n: int) -> list[dict[str, Any]]:
    return [citation(f"citation:{i:03d}") for i in range(n)]


def capture_with_citations(n: int, *, component_cites: int, evidence_cites: int) -> dict[str, Any]:
    args = golden_capture()
    payload = args["payload"]
    payload["citations"] = many_citations(n)
    payload["components"][0]["citation_ids"] = [f"citation:{i:03d}" for i in range(component_cites)]
    payload["primary_event"]["citation_id"] = "citation:000"
    args["evidence"]["citation_ids"] = [f"citation:{i:03d}" for i in range(evidence_cites)]
    return args


def capture_with_components(n: int) -> dict[str, Any]:
    args = golden_capture()
    kinds = ("decision", "context", "evidence")
    args["payload"]["components"] = [
        {"component_id": f"component:{i:02d}", "kind": kinds[i % 3], "text": f"Part {i} of the record.", "citation_ids": ["citation:source"]}
        for i in range(n)
    ]
    args["payload"]["primary_component_id"] = "component:00"
    return args


def sized_capture(total: int) -> dict[str, Any]:
    """The golden capture padded with context components to exactly `total` canonical bytes."""
    text_max = 65_536
    for pads in range(1, 64):
        args = golden_capture()
        args["idempotency_key"] = f"capture-sized-{total}"
        for i in range(pads):
            args["payload"]["components"].append(
                {"component_id": f"component:pad-{i:02d}", "kind": "context", "text": "x", "citation_ids": ["citation:source"]}
            )
        missing = total - jcs_size(args)
        if missing <= pads * (text_max - 1):
            for component in args["payload"]["components"][1:]:
                grow = min(missing, text_max - 1)
                component["text"] += "x" * grow
                missing -= grow
            assert jcs_size(args) == total
            return args
    raise AssertionError("cannot reach the size")


# Null and missing members of the maximal capture: the rules broken besides the
# type/required failure itself. A member whose loss leaves a cross-reference
# dangling breaks that cross-reference too.
_CITATIONS_GONE = ["component_citations_resolve", "primary_event_citation_resolves", "evidence_citations_resolve"]
CAPTURE_MEMBERS: list[tuple[tuple[Any, ...], bool, list[str]]] = [
    # (path, required, rules broken besides the member's own failure)
    (("idempotency_key",), True, []),
    (("payload",), True, ["evidence_citations_resolve"]),
    (("evidence",), True, []),
    (("payload", "schema_version"), True, []),
    (("payload", "purpose_ref"), True, []),
    (("payload", "valid_time"), True, []),
    (("payload", "components"), True, ["primary_component_resolves"]),
    (("payload", "primary_component_id"), True, []),
    (("payload", "primary_event"), True, []),
    (("payload", "citations"), True, _CITATIONS_GONE),
    (("payload", "retention"), False, []),
    (("payload", "reconciliation"), False, []),
    (("payload", "valid_time", "t"), True, []),
    (("payload", "valid_time", "t_end"), False, []),
    (("payload", "components", 0, "component_id"), True, ["primary_component_resolves"]),
    (("payload", "components", 0, "kind"), True, []),
    (("payload", "components", 0, "text"), True, []),
    (("payload", "components", 0, "citation_ids"), True, ["primary_event_citation_in_primary_component"]),
    (("payload", "primary_event", "at"), True, []),
    (("payload", "primary_event", "type_ref"), True, []),
    (("payload", "primary_event", "citation_id"), True, []),
    (("payload", "citations", 0, "citation_id"), True, _CITATIONS_GONE),
    (("payload", "citations", 0, "source_ref"), True, []),
    (("payload", "citations", 0, "locator"), True, []),
    (("payload", "citations", 0, "content_digest"), True, []),
    (("payload", "citations", 0, "observed_at"), False, []),
    (("payload", "citations", 0, "locator", "scheme"), True, []),
    (("payload", "citations", 0, "locator", "value"), True, []),
    (("payload", "retention", "derivative_rule"), True, []),
    (("payload", "retention", "expires_at"), False, []),
    (("payload", "reconciliation", "family_refs"), True, []),
    (("evidence", "evidence_ref"), True, []),
    (("evidence", "evidence_digest"), True, []),
    (("evidence", "citation_ids"), True, []),
    (("evidence", "attestation"), False, []),
]
SAFE_INTEGER_MEMBERS = {("payload", "valid_time", "t"), ("payload", "valid_time", "t_end"), ("payload", "primary_event", "at")}

INVALID_INSTANTS: list[tuple[str, str, str]] = [
    # (description, instant, rule)
    ("29 February of a common year (2026)", "2026-02-29T12:34:56.789Z", "calendar_instant"),
    ("30 February", "2024-02-30T12:34:56.789Z", "calendar_instant"),
    ("31 April", "2026-04-31T12:34:56.789Z", "calendar_instant"),
    ("month 13", "2026-13-01T12:34:56.789Z", "calendar_instant"),
    ("month 00", "2026-00-10T12:34:56.789Z", "calendar_instant"),
    ("day 00", "2026-08-00T12:34:56.789Z", "calendar_instant"),
    ("29 February 2100 (century, not a leap year)", "2100-02-29T00:00:00.000Z", "calendar_instant"),
    ("29 February 1900 (century, not a leap year)", "1900-02-29T00:00:00.000Z", "calendar_instant"),
    ("hour 24 (T24:00:00.000Z)", "2026-08-16T24:00:00.000Z", "calendar_instant"),
    ("minute 60", "2026-08-16T23:60:00.000Z", "calendar_instant"),
    ("second 60 (a leap second)", "2016-12-31T23:59:60.000Z", "calendar_instant"),
    ("no milliseconds", "2026-08-16T12:34:56Z", "schema_keyword"),
    ("microseconds", "2026-08-16T12:34:56.789000Z", "schema_keyword"),
    ("two fraction digits", "2026-08-16T12:34:56.78Z", "schema_keyword"),
    ("a +00:00 offset instead of Z", "2026-08-16T12:34:56.789+00:00", "schema_keyword"),
    ("a +02:00 offset", "2026-08-16T14:34:56.789+02:00", "schema_keyword"),
    ("lowercase t and z", "2026-08-16t12:34:56.789z", "schema_keyword"),
    ("a space instead of T", "2026-08-16 12:34:56.789Z", "schema_keyword"),
    ("a date only", "2026-08-16", "schema_keyword"),
    ("a one-digit month", "2026-8-16T12:34:56.789Z", "schema_keyword"),
    ("a five-digit year", "+02026-08-16T12:34:56.789Z", "schema_keyword"),
    ("a trailing newline", "2026-08-16T12:34:56.789Z\n", "schema_keyword"),
    ("Arabic-Indic digits in the year", "\u0662\u0660\u0662\u0666-08-16T12:34:56.789Z", "schema_keyword"),
]

VALID_INSTANTS: list[tuple[str, str]] = [
    ("a leap day (2024-02-29T23:59:59.999Z)", "2024-02-29T23:59:59.999Z"),
    ("29 February 2000 (divisible by 400)", "2000-02-29T00:00:00.000Z"),
    ("the Unix epoch", "1970-01-01T00:00:00.000Z"),
    ("the last millisecond of 9999", "9999-12-31T23:59:59.999Z"),
    ("the first millisecond of year 0000", "0000-01-01T00:00:00.000Z"),
    ("the last millisecond of a day", "2026-12-31T23:59:59.999Z"),
]

DIGEST_NEAR_MISSES: list[tuple[str, str]] = [
    ("uppercase hex", "sha256:" + "A" * 64),
    ("one uppercase hex digit", "sha256:" + "a" * 63 + "F"),
    ("an uppercase prefix", "SHA256:" + "a" * 64),
    ("63 hex digits", "sha256:" + "a" * 63),
    ("65 hex digits", "sha256:" + "a" * 65),
    ("a sha-256: prefix", "sha-256:" + "a" * 64),
    ("no prefix", "a" * 64),
    ("a trailing newline", A + "\n"),
    ("a leading space", " " + A),
    ("a non-hex digit", "sha256:" + "a" * 63 + "g"),
    ("the prefix alone", "sha256:"),
    ("an empty string", ""),
    ("a sha512: digest", "sha512:" + "a" * 128),
    ("base64 instead of hex", "sha256:qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqo="),
]


def capture_cases() -> Cases:
    cases = Cases(CAPTURE, "§2 capture")
    golden, minimal, maximal = golden_capture(), minimal_capture(), maximal_capture()
    P = ("payload",)

    # valid shapes
    cases.ok("minimal: required fields only", minimal)
    cases.ok("the upstream golden payload without scope_ref", golden)
    cases.ok("maximal: every optional field", maximal)
    cases.ok("schema_version 2.0: a number with a zero fraction is the integer 2", put(golden, P + ("schema_version",), 2.0))
    cases.ok("retain without expires_at", put(golden, P + ("retention",), {"derivative_rule": "retain"}))
    cases.ok(
        "expires_at one millisecond after the capture time",
        put(golden, P + ("retention",), {"derivative_rule": "make-ineligible", "expires_at": "2026-08-16T12:34:56.790Z"}),
        section="§2 capture",
    )
    cases.ok("expires_at on a leap day (2028-02-29)", put(golden, P + ("retention",), {"derivative_rule": "retain", "expires_at": "2028-02-29T00:00:00.000Z"}))
    cases.ok("expires_at at the last millisecond of 9999", put(golden, P + ("retention",), {"derivative_rule": "retain", "expires_at": "9999-12-31T23:59:59.999Z"}))
    for description, instant in VALID_INSTANTS:
        cases.ok(f"observed_at {description}", put(golden, P + ("citations", 0, "observed_at"), instant), section="§2 common encodings")
    vt = P + ("valid_time",)
    cases.ok("valid_time.t at 2^53-1", put(golden, vt, {"t": MAX_SAFE}))
    cases.ok("valid_time.t at -(2^53-1)", put(golden, vt, {"t": -MAX_SAFE}))
    cases.ok("valid_time from -(2^53-1) to 2^53-1", put(golden, vt, {"t": -MAX_SAFE, "t_end": MAX_SAFE}))
    cases.ok("valid_time.t_end equal to t at 2^53-1", put(golden, vt, {"t": MAX_SAFE, "t_end": MAX_SAFE}))
    cases.ok("valid_time.t 0", put(golden, vt, {"t": 0}))
    cases.ok("valid_time.t negative (before the epoch)", put(golden, vt, {"t": -86400000, "t_end": 0}))
    cases.ok("valid_time.t written 1755350096789.0", put(golden, vt, {"t": 1755350096789.0, "t_end": 1755350096789}))
    cases.ok("primary_event.at at 2^53-1", put(golden, P + ("primary_event", "at"), MAX_SAFE))
    cases.ok("primary_event.at at -(2^53-1)", put(golden, P + ("primary_event", "at"), -MAX_SAFE))
    cases.ok("primary_event.at unrelated to valid_time", put(golden, P + ("primary_event", "at"), 0))
    for kind in ("context", "evidence"):
        cases.ok(f"the primary component of kind {kind}", put(golden, P + ("components", 0, "kind"), kind))
    cases.ok("64 components (the maximum)", capture_with_components(64))
    cases.ok("256 citations, all cited by the component and the evidence (the maximum)", capture_with_citations(256, component_cites=256, evidence_cites=256))
    cases.ok("evidence naming a subset of the citations", edit(maximal, lambda a: a["evidence"].update(citation_ids=["citation:review"])))
    cases.ok("primary event citing the second of the primary component's citations", put(maximal, P + ("primary_event", "citation_id"), "citation:review"))
    cases.ok("a locator scheme outside any registry", put(golden, P + ("citations", 0, "locator"), {"scheme": "x-custom-scheme", "value": "anything at all"}))
    text = P + ("components", 0, "text")
    cases.ok("component text of 1 byte", put(golden, text, "."))
    cases.ok("component text of 65536 ASCII bytes", put(golden, text, "t" * 65536))
    cases.ok("component text of 65536 bytes: 16384 x U+1F600", put(golden, text, C4 * 16384))
    cases.ok("component text of 65536 bytes: 21845 x U+20AC and 1 ASCII", put(golden, text, C3 * 21845 + "t"))
    cases.ok("component text in NFD: free text need not be NFC", put(golden, text, f"D{NFD_E}cision appliqu{NFD_E}e."), section="§2 common encodings")
    cases.ok("component text holding control characters", put(golden, text, "line 1\nline 2\r\n\tend\u0000"))
    attestation = ("evidence", "attestation")
    cases.ok("attestation empty", put(golden, attestation, ""))
    cases.ok("attestation of 4096 ASCII bytes", put(golden, attestation, "s" * 4096))
    cases.ok("attestation of 4096 bytes: 1024 x U+1F600", put(golden, attestation, C4 * 1024))
    cases.ok("attestation in NFD: free text need not be NFC", put(golden, attestation, f"sign{NFD_E}"), section="§2 common encodings")
    families = P + ("reconciliation", "family_refs")
    cases.ok("one family ref", put(golden, families, ["family:a"]))
    cases.ok("64 family refs, sorted (the maximum)", put(golden, families, [f"family:{i:02d}" for i in range(64)]))
    cases.ok("family refs sorted: uppercase before lowercase", put(golden, families, ["Family", "family"]))
    cases.ok("family refs sorted: a prefix before its extension", put(golden, families, ["family", "family:a"]))
    cases.ok("family refs sorted: U+00E9 after ASCII", put(golden, families, ["family:z", f"family:{C2}"]))
    cases.ok(
        "family refs in UTF-16 order: U+1F600 before U+FF01 (code-point order differs)",
        put(golden, families, [f"family:{C4}", "family:\uff01"]),
    )
    cases.ok("family refs of 512 bytes each", put(golden, families, [C4 * 127 + "aaaa", C4 * 128]))

    # opaque references and idempotency keys
    opaque_ref_battery(cases, golden, P + ("purpose_ref",))
    opaque_ref_battery(cases, golden, P + ("citations", 0, "source_ref"), full=False)
    opaque_ref_battery(cases, golden, P + ("citations", 0, "locator", "scheme"), full=False)
    opaque_ref_battery(cases, golden, P + ("citations", 0, "locator", "value"), full=False)
    opaque_ref_battery(cases, golden, P + ("primary_event", "type_ref"), full=False)
    opaque_ref_battery(cases, golden, ("evidence", "evidence_ref"), full=False)
    idempotency_battery(cases, golden)
    sec = "§2 common encodings"
    cases.ok("citation_id of 512 bytes (128 x U+1F600), used consistently", rename(golden, "citation:source", C4 * 128), section=sec)
    cases.ok("component_id of 512 bytes (170 x U+20AC and 2 ASCII), used consistently", rename(golden, "component:decision", C3 * 170 + "ab"), section=sec)
    cases.ok("citation_id of 1 byte, used consistently", rename(golden, "citation:source", "c"), section=sec)
    cases.bad("citation_id of 513 bytes, used consistently", rename(golden, "citation:source", C4 * 128 + "c"), ["utf8_bytes"], section=sec)
    cases.bad("component_id empty, used consistently", rename(golden, "component:decision", ""), ["schema_keyword", "utf8_bytes"], section=sec)
    cases.bad("citation_id in NFD, used consistently", rename(golden, "citation:source", f"citation:caf{NFD_E}"), ["nfc"], section=sec)
    cases.bad("component_id holding a lone surrogate, used consistently", rename(golden, "component:decision", "component:\ud800"), ["unicode_scalars"], section=sec)
    cases.bad("family ref in NFD", put(golden, families, [f"family:caf{NFD_E}"]), ["nfc"], section=sec)
    cases.bad("family ref of 513 bytes", put(golden, families, [C4 * 128 + "a"]), ["utf8_bytes"], section=sec)
    cases.bad("family ref empty", put(golden, families, [""]), ["schema_keyword", "utf8_bytes"], section=sec)
    cases.bad("a component citing an unknown citation id written in NFD", put(golden, P + ("components", 0, "citation_ids"), ["citation:source", f"citation:caf{NFD_E}"]), ["nfc", "component_citations_resolve"], section=sec)

    # lone surrogates
    cases.bad("component text holding a lone surrogate", put(golden, text, "Applied \ud800 the correction."), ["unicode_scalars"], section=sec)
    cases.bad("attestation holding a lone surrogate", put(golden, attestation, "signed \udbff"), ["unicode_scalars"], section=sec)
    cases.bad("payload key holding a lone surrogate", put(golden, P + ("note-\ud800",), "value"), ["unicode_scalars"], section=sec)
    cases.bad("locator key holding a lone surrogate", put(golden, P + ("citations", 0, "locator", "\udc00"), "value"), ["unicode_scalars"], section=sec)

    # closed objects, host-owned fields, nulls and missing members
    host_owned_battery(cases, golden)
    for name in ("schema_version", "authorization", "source_order", "deadline_at", "cancellation_ref"):
        cases.bad(f"engine request field {name} at the top level", put(golden, (name,), "value"), ["closed_schema"], section="§0")
    cases.bad("scope_ref in the payload: the host binds the scope", put(golden, P + ("scope_ref",), "scope:case-7"), ["closed_schema"], section="§0")
    cases.bad("derivation in the payload", put(golden, P + ("derivation",), {"source_record_ids": [RECORD_ID], "transform_ref": "transform:x", "transform_receipt_digest": A}), ["closed_schema"])
    cases.bad("host-owned field tenant in the payload", put(golden, P + ("tenant",), "tenant:acme"), ["closed_schema"], section="§0")
    cases.bad("host-owned field confirmed in the payload", put(golden, P + ("confirmed",), True), ["closed_schema"], section="§0")
    nested_extras = [
        ("valid_time", P + ("valid_time", "unit"), "ms"),
        ("a component", P + ("components", 0, "confidence"), 0.9),
        ("the second component", ("payload", "components", 1, "confidence"), 0.9),
        ("primary_event", P + ("primary_event", "occurred_at"), "2026-08-16T12:34:56.789Z"),
        ("a citation", P + ("citations", 0, "title"), "Correction note"),
        ("a locator", P + ("citations", 0, "locator", "page"), 3),
        ("retention", P + ("retention", "ceiling"), "2030-01-01T00:00:00.000Z"),
        ("reconciliation", P + ("reconciliation", "strategy"), "merge"),
        ("evidence", ("evidence", "trust_class"), "verified"),
    ]
    for where, path, value in nested_extras:
        cases.bad(f"unknown field in {where}", put(maximal, path, value), ["closed_schema"], section="§0")
    cases.bad("unknown field with a null value in a citation", put(maximal, P + ("citations", 1, "note"), None), ["closed_schema"], section="§0")
    cases.bad("host-owned field principal in evidence", put(maximal, ("evidence", "principal"), "principal:alice"), ["closed_schema"], section="§0")
    for path, required, side in CAPTURE_MEMBERS:
        own = "safe_integer" if path in SAFE_INTEGER_MEMBERS else "schema_keyword"
        cases.bad(f"{label(path)} is null", put(maximal, path, None), [own, *side], section="§0")
        if required:
            cases.bad(f"{label(path)} missing", drop(maximal, path), ["schema_keyword", *side])
    cases.bad("a component is null", put(maximal, P + ("components", 0), None), ["schema_keyword", "primary_component_resolves"], section="§0")
    cases.bad("a citation is null", put(maximal, P + ("citations", 0), None), ["schema_keyword", *_CITATIONS_GONE], section="§0")
    cases.bad("a component citation id is null", put(maximal, P + ("components", 0, "citation_ids", 0), None), ["schema_keyword", "primary_event_citation_in_primary_component"], section="§0")
    cases.bad("an evidence citation id is null", put(maximal, ("evidence", "citation_ids", 0), None), ["schema_keyword"], section="§0")
    cases.bad("a family ref is null", put(maximal, P + ("reconciliation", "family_refs", 0), None), ["schema_keyword"], section="§0")
    cases.bad("arguments are an empty object", {}, ["schema_keyword"])
    cases.bad("arguments are null", None, ["schema_keyword"])
    cases.bad("arguments are an array", [golden], ["schema_keyword"])
    cases.bad("payload is an array", put(golden, P, [golden["payload"]]), ["schema_keyword", "evidence_citations_resolve"])
    cases.bad("payload sent as a JSON string", put(golden, P, json.dumps(golden["payload"])), ["schema_keyword", "evidence_citations_resolve"])
    cases.bad("top-level key holding a lone surrogate", put(golden, ("\ud800",), "value"), ["unicode_scalars"], section=sec)
    cases.bad(
        "lone surrogate beside a broken digest: only the unencodable text is reported",
        put(put(golden, text, "x\ud800"), ("evidence", "evidence_digest"), "sha256:"),
        ["unicode_scalars"],
        section=sec,
    )

    # schema_version, kinds, counts, texts
    for value, what in ((1, "1"), ("2", "the string 2"), (3, "3")):
        cases.bad(f"schema_version {what}", put(golden, P + ("schema_version",), value), ["schema_keyword"])
    for value in ("summary", "Decision", ""):
        cases.bad(f"component kind {value!r}", put(golden, P + ("components", 0, "kind"), value), ["schema_keyword"])
    cases.bad("no components", put(golden, P + ("components",), []), ["schema_keyword", "primary_component_resolves"])
    cases.bad("65 components", capture_with_components(65), ["schema_keyword"])
    cases.bad("no citations", put(golden, P + ("citations",), []), ["schema_keyword", *_CITATIONS_GONE])
    cases.bad("257 citations", capture_with_citations(257, component_cites=1, evidence_cites=1), ["schema_keyword"])
    cases.bad("a component citing 257 citations", capture_with_citations(257, component_cites=257, evidence_cites=1), ["schema_keyword"])
    cases.bad("evidence naming 257 citations", capture_with_citations(257, component_cites=1, evidence_cites=257), ["schema_keyword"])
    cases.bad("a non-primary component citing nothing", put(maximal, P + ("components", 1, "citation_ids"), []), ["schema_keyword"])
    cases.bad("the primary component citing nothing", put(golden, P + ("components", 0, "citation_ids"), []), ["schema_keyword", "primary_event_citation_in_primary_component"])
    cases.bad("a component citing the same citation twice", put(golden, P + ("components", 0, "citation_ids"), ["citation:source", "citation:source"]), ["schema_keyword"])
    cases.bad("component citation_ids as a string", put(maximal, P + ("components", 1, "citation_ids"), "citation:review"), ["schema_keyword"])
    cases.bad("evidence naming no citation", put(golden, ("evidence", "citation_ids"), []), ["schema_keyword"])
    cases.bad("evidence naming the same citation twice", put(golden, ("evidence", "citation_ids"), ["citation:source", "citation:source"]), ["schema_keyword"])
    cases.bad("component text empty", put(golden, text, ""), ["schema_keyword", "utf8_bytes"])
    cases.bad("component text of 65537 ASCII bytes", put(golden, text, "t" * 65537), ["schema_keyword", "utf8_bytes"])
    cases.bad("component text of 65537 bytes: 16384 x U+1F600 and 1 ASCII", put(golden, text, C4 * 16384 + "t"), ["utf8_bytes"])
    cases.bad("component text of 65538 bytes: 32769 x U+00E9", put(golden, text, C2 * 32769), ["utf8_bytes"])
    cases.bad("component text as an array", put(golden, text, ["Applied", "the", "correction."]), ["schema_keyword"])
    cases.bad("attestation of 4097 ASCII bytes", put(golden, attestation, "s" * 4097), ["schema_keyword", "utf8_bytes"])
    cases.bad("attestation of 4097 bytes: 1024 x U+1F600 and 1 ASCII", put(golden, attestation, C4 * 1024 + "s"), ["utf8_bytes"])
    cases.bad("attestation as an object", put(golden, attestation, {"signature": "abc"}), ["schema_keyword"])
    cases.bad("locator as a string", put(golden, P + ("citations", 0, "locator"), "document#case-7"), ["schema_keyword"])
    cases.bad("locator without value", put(golden, P + ("citations", 0, "locator"), {"scheme": "document"}), ["schema_keyword"])

    # safe integers and valid time
    cases.bad("valid_time.t 2^53", put(golden, vt, {"t": 2**53}), ["safe_integer"])
    cases.bad("valid_time.t -(2^53)", put(golden, vt, {"t": -(2**53)}), ["safe_integer"])
    cases.bad("valid_time.t_end 2^53", put(golden, vt, {"t": 1755350096789, "t_end": 2**53}), ["safe_integer"])
    cases.bad("primary_event.at 2^53", put(golden, P + ("primary_event", "at"), 2**53), ["safe_integer"])
    cases.bad("primary_event.at -(2^53)", put(golden, P + ("primary_event", "at"), -(2**53)), ["safe_integer"])
    cases.bad("primary_event.at 2^64", put(golden, P + ("primary_event", "at"), 2**64), ["safe_integer"])
    cases.bad("valid_time.t 2^53 written 9007199254740992.0", put(golden, vt, {"t": float(2**53)}), ["safe_integer"])
    cases.bad("valid_time.t 1.5", put(golden, vt, {"t": 1.5}), ["safe_integer"])
    cases.bad("valid_time.t_end 1755350096789.5", put(golden, vt, {"t": 1755350096789, "t_end": 1755350096789.5}), ["safe_integer"])
    cases.bad("primary_event.at 1.5", put(golden, P + ("primary_event", "at"), 1.5), ["safe_integer"])
    cases.bad("valid_time.t as a string", put(golden, vt, {"t": "1755350096789"}), ["safe_integer"])
    cases.bad("valid_time.t as an instant string", put(golden, vt, {"t": NOW}), ["safe_integer"])
    cases.bad("valid_time.t true", put(golden, vt, {"t": True}), ["safe_integer"])
    cases.bad("valid_time.t_end one millisecond before t", put(golden, vt, {"t": 1755350096789, "t_end": 1755350096788}), ["valid_time_order"])
    cases.bad("valid_time.t_end 0 before a positive t", put(golden, vt, {"t": 1755350096789, "t_end": 0}), ["valid_time_order"])
    cases.bad("valid_time from 2^53-1 back to -(2^53-1)", put(golden, vt, {"t": MAX_SAFE, "t_end": -MAX_SAFE}), ["valid_time_order"])
    cases.bad("valid_time.t_end -(2^53) before t", put(golden, vt, {"t": 0, "t_end": -(2**53)}), ["safe_integer", "valid_time_order"])
    cases.bad("valid_time empty", put(golden, vt, {}), ["schema_keyword"])
    cases.bad("valid_time with t_end only", put(golden, vt, {"t_end": 1755350096789}), ["schema_keyword"])

    # instants
    for description, instant, rule in INVALID_INSTANTS:
        cases.bad(f"observed_at with {description}", put(golden, P + ("citations", 0, "observed_at"), instant), [rule], section="§2 common encodings")
    cases.bad("observed_at as epoch milliseconds", put(golden, P + ("citations", 0, "observed_at"), 1755350096789), ["schema_keyword"], section="§2 common encodings")
    retention = P + ("retention",)
    cases.bad("expires_at equal to the capture time", put(golden, retention, {"derivative_rule": "retain", "expires_at": NOW}), ["expires_after_capture"])
    cases.bad("expires_at one millisecond before the capture time", put(golden, retention, {"derivative_rule": "retain", "expires_at": "2026-08-16T12:34:56.788Z"}), ["expires_after_capture"])
    cases.bad("expires_at a year before the capture time", put(golden, retention, {"derivative_rule": "make-ineligible", "expires_at": "2025-08-16T12:34:56.789Z"}), ["expires_after_capture"])
    cases.bad("expires_at at the epoch", put(golden, retention, {"derivative_rule": "retain", "expires_at": "1970-01-01T00:00:00.000Z"}), ["expires_after_capture"])
    cases.bad("expires_at in year 0000", put(golden, retention, {"derivative_rule": "retain", "expires_at": "0000-01-01T00:00:00.000Z"}), ["expires_after_capture"])
    cases.bad("expires_at on 29 February of a common year (2027)", put(golden, retention, {"derivative_rule": "retain", "expires_at": "2027-02-29T12:00:00.000Z"}), ["calendar_instant"], section="§2 common encodings")
    cases.bad("expires_at at hour 24", put(golden, retention, {"derivative_rule": "retain", "expires_at": "2027-08-16T24:00:00.000Z"}), ["calendar_instant"], section="§2 common encodings")
    cases.bad("expires_at without milliseconds", put(golden, retention, {"derivative_rule": "retain", "expires_at": "2027-08-16T12:34:56Z"}), ["schema_keyword"], section="§2 common encodings")
    cases.bad("expires_at with a +00:00 offset", put(golden, retention, {"derivative_rule": "retain", "expires_at": "2027-08-16T12:34:56.789+00:00"}), ["schema_keyword"], section="§2 common encodings")
    cases.bad("expires_at as epoch milliseconds", put(golden, retention, {"derivative_rule": "retain", "expires_at": 1786883696789}), ["schema_keyword"])
    for value in ("delete", "Retain", "make_ineligible"):
        cases.bad(f"derivative_rule {value!r}", put(golden, retention, {"derivative_rule": value}), ["schema_keyword"])
    cases.bad("retention empty", put(golden, retention, {}), ["schema_keyword"])
    cases.bad("retention with expires_at only", put(golden, retention, {"expires_at": "2027-08-16T12:34:56.789Z"}), ["schema_keyword"])

    # reconciliation
    cases.bad("family refs unsorted", put(golden, families, ["family:b", "family:a"]), ["family_refs_sorted"])
    cases.bad("family refs unsorted: lowercase before uppercase", put(golden, families, ["family", "Family"]), ["family_refs_sorted"])
    cases.bad("family refs unsorted: an extension before its prefix", put(golden, families, ["family:a", "family"]), ["family_refs_sorted"])
    cases.bad(
        "family refs in code-point order but not UTF-16 order: U+FF01 before U+1F600",
        put(golden, families, ["family:\uff01", f"family:{C4}"]),
        ["family_refs_sorted"],
    )
    cases.bad("family refs with an adjacent duplicate", put(golden, families, ["family:a", "family:a"]), ["schema_keyword", "family_refs_sorted"])
    cases.bad("family refs with a distant duplicate", put(golden, families, ["family:a", "family:b", "family:a"]), ["schema_keyword", "family_refs_sorted"])
    cases.bad("65 family refs, sorted", put(golden, families, [f"family:{i:02d}" for i in range(65)]), ["schema_keyword"])
    cases.bad("family refs as a string", put(golden, families, "family:a"), ["schema_keyword"])
    cases.bad("reconciliation empty", put(golden, P + ("reconciliation",), {}), ["schema_keyword"])

    # cross-references
    sec = "§2 capture"
    cases.bad(
        "a component citing an unknown citation",
        put(golden, P + ("components", 0, "citation_ids"), ["citation:source", "citation:missing"]),
        ["component_citations_resolve"],
    )
    cases.bad(
        "a non-primary component citing only an unknown citation",
        put(maximal, P + ("components", 1, "citation_ids"), ["citation:missing"]),
        ["component_citations_resolve"],
    )
    cases.bad("primary_component_id naming no component", put(golden, P + ("primary_component_id",), "component:missing"), ["primary_component_resolves"])
    cases.bad("primary_component_id naming a citation", put(golden, P + ("primary_component_id",), "citation:source"), ["primary_component_resolves"])
    cases.bad("primary_component_id differing in case", put(golden, P + ("primary_component_id",), "Component:decision"), ["primary_component_resolves"])
    cases.bad(
        "primary event citing an unknown citation",
        put(golden, P + ("primary_event", "citation_id"), "citation:missing"),
        ["primary_event_citation_resolves", "primary_event_citation_in_primary_component"],
    )
    cases.bad(
        "primary event citing an unknown citation that the primary component also names",
        edit(golden, lambda a: (
            a["payload"]["primary_event"].update(citation_id="citation:missing"),
            a["payload"]["components"][0]["citation_ids"].append("citation:missing"),
        )),
        ["primary_event_citation_resolves", "component_citations_resolve"],
    )
    cases.bad(
        "primary event citing a known citation outside the primary component",
        put(maximal, P + ("components", 0, "citation_ids"), ["citation:review"]),
        ["primary_event_citation_in_primary_component"],
    )
    cases.bad(
        "primary event citing a citation only a non-primary component names",
        edit(maximal, lambda a: (
            a["payload"]["components"][0].update(citation_ids=["citation:source"]),
            a["payload"]["primary_event"].update(citation_id="citation:review"),
        )),
        ["primary_event_citation_in_primary_component"],
    )
    cases.bad("evidence naming an unknown citation", put(golden, ("evidence", "citation_ids"), ["citation:missing"]), ["evidence_citations_resolve"])
    cases.bad("evidence naming a component id", put(golden, ("evidence", "citation_ids"), ["citation:source", "component:decision"]), ["evidence_citations_resolve"])
    cases.bad(
        "two citations sharing a citation_id",
        edit(golden, lambda a: a["payload"]["citations"].append(citation("citation:source", "source:other", "other#1", B))),
        ["unique_citation_ids"],
    )
    cases.bad(
        "two identical citations",
        edit(golden, lambda a: a["payload"]["citations"].append(copy.deepcopy(a["payload"]["citations"][0]))),
        ["unique_citation_ids"],
    )
    cases.bad(
        "two components sharing a component_id",
        edit(golden, lambda a: a["payload"]["components"].append(
            {"component_id": "component:decision", "kind": "context", "text": "Another part.", "citation_ids": ["citation:source"]}
        )),
        ["unique_component_ids"],
    )
    cases.bad(
        "every cross-reference broken at once",
        edit(maximal, lambda a: (
            a["payload"]["citations"].append(citation("citation:review")),
            a["payload"]["components"].append(copy.deepcopy(a["payload"]["components"][1])),
            a["payload"]["components"][2].update(citation_ids=["citation:gone"]),
            a["payload"].update(primary_component_id="component:gone"),
            a["payload"]["primary_event"].update(citation_id="citation:gone"),
            a["evidence"].update(citation_ids=["citation:gone"]),
        )),
        [
            "unique_citation_ids",
            "unique_component_ids",
            "component_citations_resolve",
            "primary_component_resolves",
            "primary_event_citation_resolves",
            "evidence_citations_resolve",
        ],
    )

    # digests
    sec = "§2 error table"
    for field, path in (("content_digest", P + ("citations", 0, "content_digest")), ("evidence_digest", ("evidence", "evidence_digest"))):
        for description, value in DIGEST_NEAR_MISSES:
            cases.bad(f"{field} with {description}", put(golden, path, value), ["digest_format"], section=sec)
        cases.bad(f"{field} as an integer", put(golden, path, 7), ["schema_keyword"], section=sec)
        cases.bad(f"{field} as an object", put(golden, path, {"sha256": "a" * 64}), ["schema_keyword"], section=sec)
    cases.bad("a digest near-miss in the second citation", put(maximal, P + ("citations", 1, "content_digest"), B.upper()), ["digest_format"], section=sec)
    cases.bad(
        "both digests malformed",
        put(put(golden, P + ("citations", 0, "content_digest"), A.upper()), ("evidence", "evidence_digest"), "sha-256:" + "b" * 64),
        ["digest_format"],
        section=sec,
    )
    cases.bad(
        "a malformed digest beside an unknown field: INVALID_SCHEMA wins",
        put(put(golden, ("evidence", "evidence_digest"), A.upper()), ("evidence", "verifier"), "x"),
        ["digest_format", "closed_schema"],
        section=sec,
    )
    cases.bad(
        "a malformed digest beside a non-NFC reference: INVALID_SCHEMA wins",
        put(put(golden, P + ("citations", 0, "content_digest"), A + "\n"), P + ("purpose_ref",), f"purpose:caf{NFD_E}"),
        ["digest_format", "nfc"],
        section=sec,
    )
    cases.bad(
        "a malformed digest beside a dangling citation: INVALID_SCHEMA wins",
        put(put(golden, P + ("citations", 0, "content_digest"), "sha256:" + "a" * 63), ("evidence", "citation_ids"), ["citation:missing"]),
        ["digest_format", "evidence_citations_resolve"],
        section=sec,
    )
    cases.bad(
        "a malformed digest beside unsorted family refs: INVALID_SCHEMA wins",
        put(put(maximal, ("evidence", "evidence_digest"), "SHA256:" + "b" * 64), families, ["family:b", "family:a"]),
        ["digest_format", "family_refs_sorted"],
        section=sec,
    )

    # size of the whole argument object
    sec = "§2 common encodings"
    cases.ok("arguments of exactly 1048576 canonical bytes", sized_capture(ARGUMENTS_MAX_BYTES), section=sec)
    cases.bad("arguments of 1048577 canonical bytes", sized_capture(ARGUMENTS_MAX_BYTES + 1), ["arguments_size"], section=sec)
    return cases


# -- digests -------------------------------------------------------------------


def _with_text(payload: dict[str, Any], text: str) -> dict[str, Any]:
    return put(payload, ("components", 0, "text"), text)


def digest_vectors() -> list[dict[str, Any]]:
    trust = {
        "class": "asserted",
        "evidence_digest": A,
        "verifier_id": "engine:asserted",
        "verifier_version": "1",
        "issued_at": "2026-08-16T12:34:56.789Z",
        "revocation_epoch": "0",
        "receipt_digest": A,
    }
    record = {
        **GOLDEN_PAYLOAD,
        "payload_digest": "sha256:df5abcbf1d1091794c1f37efcd89e5f7bd6b91afa631e29f084178d35c55e913",
        "recorded_at": "2026-08-16T12:34:56.789Z",
        "recorded_cursor": "7",
        "authorization_receipt_digest": A,
        "trust": trust,
    }
    profile_config = {
        "profile": "offline_lexical_v1",
        "tokenizer_version": "graphify-memory:tokenizer:v1",
        "bm25": {"k1": 1.2, "b": 0.75},
        "field_weights": {"primary": 3, "decision": 2, "evidence": 1.5, "context": 1, "citations": 0.5},
        "rrf_k": 60,
        "max_lexical_variants": 8,
        "half_life_ms": 2592000000,
        "weights": {"lexical": 0.85, "recency": 0.15},
    }
    nfc_text = f"D{C2}cision appliqu{C2}e apr\u00e8s la correction document{C2}e."
    nfd_text = f"D{NFD_E}cision appliqu{NFD_E}e apre\u0300s la correction document{NFD_E}e."
    golden_digest = "sha256:df5abcbf1d1091794c1f37efcd89e5f7bd6b91afa631e29f084178d35c55e913"
    record_digest_value = "sha256:c75783c63ab735102bf1cf8fb361f8eee2771d3accb233a7e67c3354b5094415"
    accented_digest = "sha256:aaeb173ede04d25b8a6bc0729549563102a3e4ba1c4247a58fb3ae3e9c38fad2"
    accented_candidate = "candidate_1653efaf446b882d26aacb5a0f65f0234fc5e27f685dd35655eee8e56a9c38c1"
    return [
        {
            "description": "upstream golden payload_digest (rhanka/engram tests/memory-contract-schema.test.ts at d977a364)",
            "function": "payload_digest",
            "input": {"payload": GOLDEN_PAYLOAD},
            "expected": golden_digest,
        },
        {
            "description": "the golden payload with its keys in reverse order: canonical form sorts keys",
            "function": "payload_digest",
            "input": {"payload": dict(reversed(list(GOLDEN_PAYLOAD.items())))},
            "expected": golden_digest,
        },
        {
            "description": "the golden payload as MCP arguments carry it, without scope_ref",
            "function": "payload_digest",
            "input": {"payload": {k: v for k, v in GOLDEN_PAYLOAD.items() if k != "scope_ref"}},
            "expected": "sha256:1b6f773ef5498981f27e7b67b775b4a21a45d2dc2f3dade2976869f3e109044a",
        },
        {
            "description": "accented component text in NFC",
            "function": "payload_digest",
            "input": {"payload": _with_text(GOLDEN_PAYLOAD, nfc_text)},
            "expected": accented_digest,
        },
        {
            "description": "the same text in NFD gives the NFC digest: strings are normalised before hashing",
            "function": "payload_digest",
            "input": {"payload": _with_text(GOLDEN_PAYLOAD, nfd_text)},
            "expected": accented_digest,
        },
        {
            "description": "record_digest of the golden payload with derived writer fields",
            "function": "record_digest",
            "input": {"record": record},
            "expected": record_digest_value,
        },
        {
            "description": "record_digest ignores the record's own record_id and record_digest",
            "function": "record_digest",
            "input": {"record": {**record, "record_id": "mem_" + "a" * 52, "record_digest": A}},
            "expected": record_digest_value,
        },
        {
            "description": "record_id of the golden record: mem_ and 52 base32 characters",
            "function": "record_id",
            "input": {"record_digest": record_digest_value},
            "expected": RECORD_ID,
        },
        {
            "description": "record_id of the all-zero digest",
            "function": "record_id",
            "input": {"record_digest": "sha256:" + "0" * 64},
            "expected": "mem_" + "a" * 52,
        },
        {
            "description": "candidate_id of source:case, sequence 1, idempotency-key-0001",
            "function": "candidate_id",
            "input": {"source_ref": "source:case", "sequence": "1", "idempotency_key": "idempotency-key-0001"},
            "expected": CANDIDATE_ID,
        },
        {
            "description": "candidate_id with accented references in NFC",
            "function": "candidate_id",
            "input": {"source_ref": f"source:caf{C2}", "sequence": "1", "idempotency_key": f"cl{C2}-idempotence-0001"},
            "expected": accented_candidate,
        },
        {
            "description": "candidate_id with the same references in NFD gives the NFC id",
            "function": "candidate_id",
            "input": {"source_ref": f"source:caf{NFD_E}", "sequence": "1", "idempotency_key": f"cl{NFD_E}-idempotence-0001"},
            "expected": accented_candidate,
        },
        {
            "description": "policy evidence digest of evidence:opaque",
            "function": "digest",
            "input": {"domain": "graphify-memory/policy-evidence/v1", "value": {"policy_evidence_ref": "evidence:opaque"}},
            "expected": "sha256:8228cc925fca7caa7dd226a3294f23ba73e73301ef112c1b2bb6cb6ff574d385",
        },
        *operation_digest_vectors(),
        {
            "description": "offline recall profile_config_digest",
            "function": "receipt_digest",
            "input": {"kind": "recall-profile-config", "value": profile_config, "field": "profile_config_digest"},
            "expected": "sha256:c3bf9494494e49141a7c1119082609af3427cdab15034ff2be1fb4459ab5602a",
        },
        {
            "description": "offline recall profile_config_digest ignores its own digest field",
            "function": "receipt_digest",
            "input": {"kind": "recall-profile-config", "value": {**profile_config, "profile_config_digest": A}, "field": "profile_config_digest"},
            "expected": "sha256:c3bf9494494e49141a7c1119082609af3427cdab15034ff2be1fb4459ab5602a",
        },
    ]


def operation_digest_vectors() -> list[dict[str, Any]]:
    """The digest a host signs into a confirmation reference: pinned so that a host written in another language
    can check its own computation (spec/host-wiring.md §2.2)."""
    bound = {"principal": "principal:alice", "tenant": "tenant:acme", "workspace": "workspace:main"}
    withdraw = {"candidate_id": CANDIDATE_ID, "idempotency_key": "withdraw-key-0001", "reason_ref": "reason:superseded-draft"}
    forget = {"record_id": RECORD_ID, "idempotency_key": "forget-key-0001-x", "reason_ref": f"reason:demande-du-propri{C2}taire"}
    withdraw_digest = "sha256:830d4ff6d7ad56f6e92fc9409c131744d14827ea3745ea6b231cda988a4204f5"
    return [
        {
            "description": "operation_digest of a withdraw: its candidate_id is the target",
            "function": "operation_digest",
            "input": {"tool": "engram_memory_withdraw", "arguments": withdraw, **bound},
            "expected": withdraw_digest,
        },
        {
            "description": "operation_digest of the same withdraw with its arguments in reverse order",
            "function": "operation_digest",
            "input": {"tool": "engram_memory_withdraw", "arguments": dict(reversed(list(withdraw.items()))), **bound},
            "expected": withdraw_digest,
        },
        {
            "description": "operation_digest of the same withdraw for another principal differs",
            "function": "operation_digest",
            "input": {"tool": "engram_memory_withdraw", "arguments": withdraw, **bound, "principal": "principal:bob"},
            "expected": "sha256:3517f343bdf49de36aa09f5464d1c39a4a5b55d4771f6ec138bd888842be448f",
        },
        {
            "description": "operation_digest of the same withdraw under another idempotency key differs",
            "function": "operation_digest",
            "input": {"tool": "engram_memory_withdraw", "arguments": {**withdraw, "idempotency_key": "withdraw-key-0002"}, **bound},
            "expected": "sha256:bd24d16fbd0a4a478e3cb002f91a62c598e3b8a6617cae5bab72bebdef6efab9",
        },
        {
            "description": "operation_digest of a forget with an accented reason_ref (NFC, as arguments must be)",
            "function": "operation_digest",
            "input": {"tool": "engram_memory_forget", "arguments": forget, **bound},
            "expected": "sha256:5862efdc2eed1ce6855d657436980d87e6269b8ea2b4377b316d878192ee99d9",
        },
        {
            "description": "operation_digest of a gated request_admission",
            "function": "operation_digest",
            "input": {"tool": "engram_memory_request_admission", "arguments": {"candidate_id": CANDIDATE_ID, "idempotency_key": "admission-key-0001"}, **bound},
            "expected": "sha256:20bbf910ca896151071d497f77c9afc6c643659f7391f4d6e2f22299047a4fe5",
        },
    ]


# -- output ----------------------------------------------------------------------

_SURROGATE = re.compile("[\ud800-\udfff]")


def dumps(document: Any) -> str:
    """JSON text with non-ASCII characters kept, except lone surrogates, which
    cannot be encoded in UTF-8 and are written as \\uXXXX escapes (as
    ensure_ascii=True writes them) so that they survive a round trip."""
    text = json.dumps(document, ensure_ascii=False, indent=1) + "\n"
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def build() -> dict[str, str]:
    """Every fixture file, keyed by its path relative to the repository root."""
    files: dict[str, str] = {}
    for make in (search_cases, get_cases, capture_cases, admission_cases, withdraw_cases, forget_cases):
        cases = make()
        files[f"fixtures/arguments/{cases.tool}.json"] = dumps(cases.document())
    files["fixtures/digests.json"] = dumps({"vectors": digest_vectors()})
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    args = parser.parse_args(argv)
    stale = []
    for relative, text in build().items():
        path = ROOT / relative
        data = text.encode("utf-8")
        if args.check:
            if not path.is_file() or path.read_bytes() != data:
                stale.append(relative)
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        assert json.loads(data) is not None
        print(f"{relative}: {len(data):,} bytes")
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
