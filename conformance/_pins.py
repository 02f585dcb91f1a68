"""Argument cases refused only because of a profile pin, not because of the contract.

Two argument rules of the bundled schemas are this project's decisions
(``source: profile`` in spec/requirements.json), not the contract's:

- EMC-ENC-015: a ``candidate_id`` is ``candidate_`` and 64 lowercase hex digits.
  The contract calls the id opaque, so any other non-empty string is an id that
  names nothing: INVALID_SCHEMA or NOT_FOUND are both contract answers (and
  gate_failed, where the tool asks for a confirmation before looking it up).
- EMC-SRCH-014: a sent ``capability_policy`` carries both members. The contract
  gives each member a default, so leaving one out may also succeed.

``relaxed`` rewrites such a value into one the pin accepts and names the pins it
relaxed; a case is *pinned* when its arguments become acceptable that way. At
the contract level a pinned refusal is not required; ``--level profile`` scores
the pin through ``_checks.pin``. ``relaxed_value`` does the same for a returned
``candidate_id`` in a success value (EMC-ENV-007, the closed value schema's pattern).
"""

from __future__ import annotations

import re
from typing import Any

from engram_mcp.contract import load

CONTRACT = load()
CANDIDATE_PIN = "EMC-ENC-015"
POLICY_PIN = "EMC-SRCH-014"
CANDIDATE_TOOLS = ("engram_memory_request_admission", "engram_memory_withdraw")
SEARCH = "engram_memory_search"

_CANDIDATE_SCHEMA = CONTRACT.advertised_input_schema(CANDIDATE_TOOLS[0])["properties"]["candidate_id"]
CANDIDATE_FORM = re.compile(_CANDIDATE_SCHEMA["pattern"].removeprefix("^").removesuffix("$"))
WELL_FORMED_CANDIDATE = "candidate_" + "0" * 64
assert CANDIDATE_FORM.fullmatch(WELL_FORMED_CANDIDATE)
# What the contract sends in place of a left-out member (EMC-SRCH-006), as the search schema states it.
POLICY_DEFAULT: dict[str, Any] = CONTRACT.advertised_input_schema(SEARCH)["properties"]["capability_policy"]["default"]

# Contract-level answers a pinned id may get. To a server whose ids are opaque it is a valid id that names
# nothing, so a tool that needs a confirmation may ask for one before looking it up (withdraw always does,
# EMC-GATE-001) and end with gate_failed when none approves.
ANSWERS = {CANDIDATE_PIN: frozenset({"INVALID_SCHEMA", "NOT_FOUND", "gate_failed"})}
# output.value's candidate_id pattern is part of this project's closed value schema, not of the contract.
VALUE_PIN = "EMC-ENV-007"


def _lone_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(ch) <= 0xDFFF for ch in text)


def relaxed(tool: str, arguments: Any, *, any_text: bool = False) -> tuple[Any, tuple[str, ...]]:
    """The arguments with every pinned value made acceptable to its pin, and the pins that took.

    A candidate_id is replaced only when it is a non-empty string, and (unless ``any_text``, for judging
    schemas, which cannot see text rules) one free of lone surrogates, which a contract rule refuses anyway."""
    if not isinstance(arguments, dict):
        return arguments, ()
    out, pins = dict(arguments), []
    value = arguments.get("candidate_id")
    if (tool in CANDIDATE_TOOLS and isinstance(value, str) and value and not CANDIDATE_FORM.fullmatch(value)
            and (any_text or not _lone_surrogate(value))):
        out["candidate_id"] = WELL_FORMED_CANDIDATE
        pins.append(CANDIDATE_PIN)
    policy = arguments.get("capability_policy")
    if tool == SEARCH and isinstance(policy, dict) and not set(POLICY_DEFAULT) <= set(policy):
        out["capability_policy"] = {**POLICY_DEFAULT, **policy}
        pins.append(POLICY_PIN)
    return out, tuple(pins)


def relaxed_value(value: Any) -> tuple[Any, tuple[str, ...]]:
    """A success value with every returned candidate_id outside this project's form (a non-empty string, the
    contract's opaque id) made well-formed, and the pin that took: what the value schema then judges is the
    contract's part of it."""
    found = False

    def relax(node: Any) -> Any:
        nonlocal found
        if isinstance(node, list):
            return [relax(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {key: relax(item) for key, item in node.items()}
        ident = node.get("candidate_id")
        if isinstance(ident, str) and ident and not CANDIDATE_FORM.fullmatch(ident):
            out["candidate_id"], found = WELL_FORMED_CANDIDATE, True
        return out

    loose = relax(value)
    return loose, (VALUE_PIN,) if found else ()
