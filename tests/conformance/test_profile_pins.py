"""Argument verdicts that rest on a pin alone are marked, and not asked at the contract level.

EMC-ENC-015 (candidate_id's form), EMC-SRCH-014 (both capability_policy members), EMC-HP-050 (the cursor's
length), EMC-ENC-014/011 (which code a malformed digest gets), EMC-CAP-017 (family refs in UTF-16 order) and
EMC-ENC-013 (the size of the canonical form) are this project's choices: a server with opaque candidate ids,
per-member policy defaults, code-point order or INVALID_SCHEMA for a bad digest is still true to the contract.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from engram_mcp.conformance import _fuzz as fuzz
from engram_mcp.conformance import _schemas as schemas
from engram_mcp.contract import load
from engram_mcp.contract.model import _arguments as pins

CONTRACT = load()
ADMIT, WITHDRAW, SEARCH = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_search"
OPAQUE = {"type": "string", "minLength": 1}


def _opaque_candidate(tool: str) -> dict[str, Any]:
    schema = copy.deepcopy(CONTRACT.advertised_input_schema(tool))
    schema["properties"]["candidate_id"] = dict(OPAQUE)
    return schema


def _policy_with_defaults() -> dict[str, Any]:
    schema = copy.deepcopy(CONTRACT.advertised_input_schema(SEARCH))
    del schema["properties"]["capability_policy"]["required"]
    return schema


@pytest.mark.parametrize("tool", [ADMIT, WITHDRAW])
def test_an_opaque_candidate_id_schema_passes_discovery(tool: str) -> None:
    schema = _opaque_candidate(tool)
    assert schemas.disagreement(tool, schema) is None
    verdicts = schemas.pinned_verdicts(tool, schema)
    # The pin still sees what the opaque schema lets through.
    assert verdicts and {pin for pin, _, _ in verdicts} == {pins.CANDIDATE_PIN}
    assert not any(refused for _, refused, _ in verdicts)
    assert all(refused for _, refused, _ in schemas.pinned_verdicts(tool, CONTRACT.advertised_input_schema(tool)))


@pytest.mark.parametrize("tool", [ADMIT, WITHDRAW])
def test_an_opaque_candidate_id_must_still_be_a_non_empty_string(tool: str) -> None:
    schema = copy.deepcopy(CONTRACT.advertised_input_schema(tool))
    schema["properties"]["candidate_id"] = {"type": ["string", "integer"]}
    found = schemas.disagreement(tool, schema)
    assert found is not None and "candidate_id" in found, found


def test_per_member_policy_defaults_pass_discovery() -> None:
    schema = _policy_with_defaults()
    assert schemas.disagreement(SEARCH, schema) is None
    verdicts = [v for v in schemas.pinned_verdicts(SEARCH, schema) if v[0] == pins.POLICY_PIN]
    assert verdicts and not any(refused for _, refused, _ in verdicts)


def test_an_enum_violation_in_the_policy_is_still_asked() -> None:
    schema = _policy_with_defaults()
    del schema["properties"]["capability_policy"]["properties"]["network"]["enum"]
    found = schemas.disagreement(SEARCH, schema)
    assert found is not None and "network" in found, found


def _fixture(tool: str, description: str) -> fuzz.Case:
    return next(c for c in fuzz.fixture_cases(tool, everything=True) if c.label == description)


@pytest.mark.parametrize(("tool", "description", "expected"), [
    (ADMIT, "candidate_id with uppercase hex", (pins.CANDIDATE_PIN,)),
    (WITHDRAW, "a record_id in the candidate_id slot", (pins.CANDIDATE_PIN,)),
    (ADMIT, "candidate_id as an integer", ()),
    (ADMIT, "candidate_id holding a lone surrogate", ()),
    (ADMIT, "candidate_id is null", ()),
    (ADMIT, "candidate_id missing", ()),
    (SEARCH, "capability_policy without network", (pins.POLICY_PIN,)),
    (SEARCH, "capability_policy without minimum_channels", (pins.POLICY_PIN,)),
    (SEARCH, "capability_policy.network null", ()),
    (SEARCH, "capability_policy.network deny", ()),
    (SEARCH, "unknown field in capability_policy", ()),
])
def test_the_fixture_loader_marks_pinned_cases(tool: str, description: str, expected: tuple[str, ...]) -> None:
    case = _fixture(tool, description)
    assert not case.valid and case.pins == expected


@pytest.mark.parametrize("tool", [SEARCH, ADMIT, WITHDRAW, "engram_memory_capture"])
def test_the_written_marks_agree_with_the_model(tool: str) -> None:
    """The corpus on disk carries the marks the contract model gives its cases (the generator writes them)."""
    for case in fuzz.fixture_cases(tool, everything=True):
        assert fuzz.pinned_by(tool, case.arguments, case.rules) == case.pins, case.label


@pytest.mark.parametrize(("field", "value", "pin", "allowed"), [
    (("evidence", "evidence_digest"), "sha256:" + "A" * 64, pins.DIGEST_CODE_PIN, {"INVALID_SCHEMA", "INVALID_DIGEST"}),
    (("payload", "reconciliation", "family_refs"), ["family:\uff01", "family:\U0001f600"], pins.ORDER_PIN,
     {None, "INVALID_SCHEMA"}),
    (("payload", "reconciliation", "family_refs"), ["family:\U0001f600", "family:\uff01"], pins.ORDER_PIN,
     {None, "INVALID_SCHEMA"}),
])
def test_a_verdict_only_the_profile_decides_allows_both_answers(field: tuple[str, ...], value: Any, pin: str,
                                                                allowed: set[str | None]) -> None:
    arguments = fuzz.put(fuzz.base_arguments("engram_memory_capture", "purpose:test"), field, value)
    verdict = pins.judge_arguments("engram_memory_capture", arguments)
    assert verdict.pins == (pin,) and set(verdict.allowed) == allowed


def test_generated_cases_carry_the_pins() -> None:
    identifiers = {c.label: c for c in fuzz.cases("identifiers", ADMIT)}
    assert identifiers["candidate_id: uppercase hex"].pins == (pins.CANDIDATE_PIN,)
    assert identifiers["candidate_id: a record_id in place of a candidate_id"].pins == (pins.CANDIDATE_PIN,)
    assert identifiers["candidate_id: an integer"].pins == ()
    required = {c.label: c for c in fuzz.cases("required", SEARCH)}
    assert required["capability_policy.network left out (required)"].pins == (pins.POLICY_PIN,)
    assert required["query left out (required)"].pins == ()
    case = identifiers["candidate_id: uppercase hex"]
    assert fuzz.Case.from_json(case.as_json()).pins == case.pins


def _answer(code: str | None) -> Any:
    from engram_mcp.conformance._connect import Reply

    envelope = {"ok": True, "output": {}} if code is None else {"ok": False, "error": {"code": code}}
    return Reply("result", {"structuredContent": envelope, "isError": code is not None})


@pytest.mark.parametrize(("tool", "label", "answer", "right"), [
    (ADMIT, "candidate_id: uppercase hex", "INVALID_SCHEMA", True),
    (ADMIT, "candidate_id: uppercase hex", "NOT_FOUND", True),
    (ADMIT, "candidate_id: uppercase hex", None, False),
    (ADMIT, "candidate_id: an integer", "NOT_FOUND", False),
    # To a server whose ids are opaque, an id that names nothing is a valid id: a gated call confirms first.
    (WITHDRAW, "candidate_id: uppercase hex", "gate_failed", True),
    (WITHDRAW, "candidate_id: uppercase hex", None, False),
    (SEARCH, "capability_policy.network left out (required)", None, True),
    (SEARCH, "capability_policy.network left out (required)", "INVALID_SCHEMA", True),
    (SEARCH, "capability_policy.network left out (required)", "INVALID_DIGEST", False),
    (SEARCH, "query left out (required)", None, False),
])
def test_a_pinned_refusal_is_not_required_at_the_contract_level(tool: str, label: str, answer: str | None,
                                                                right: bool) -> None:
    from engram_mcp.conformance import _checks
    from engram_mcp.conformance.suite import test_arguments as suite

    family = "required" if tool == SEARCH else "identifiers"
    case = next(c for c in fuzz.cases(family, tool) if c.label == label)
    sent = suite.Sent(case, case.arguments, case.valid, case.code, _answer(answer))
    assert (suite._problem(None, sent) is None) == right  # type: ignore[arg-type]  # read only for a -32603, none here
    _checks.take_pins()
    suite._record_pins([sent])
    recorded = _checks.take_pins()
    # The pin asks for the pinned code itself, and only of pinned cases.
    assert set(recorded) == set(case.pins)
    for messages in recorded.values():
        assert (not messages) == (answer == case.code), messages


def _captured(candidate_id: str) -> dict[str, Any]:
    return {"status": "committed_pending", "candidate_id": candidate_id, "cursor": "7",
            "transaction_receipt_digest": "sha256:" + "0" * 64}


@pytest.mark.parametrize(("candidate_id", "contract", "profile"), [
    ("candidate_" + "a" * 64, True, True),  # this project's form
    ("cand-3836ae4f-77d9-4808-9493-0b69bd701b58", True, False),  # another server's opaque id
    ("", False, False),  # not an id at all: the contract's refusal too
])
def test_a_returned_candidate_id_of_another_form_breaks_only_the_closed_value_schema(
        candidate_id: str, contract: bool, profile: bool) -> None:
    """output.value's candidate_id pattern is this project's (EMC-ENV-007): the contract's value schema
    (EMC-ENV-004) holds an opaque id."""
    value = _captured(candidate_id)
    assert CONTRACT.validator(CONTRACT.contract_value_schema("engram_memory_capture")).is_valid(value) is contract
    assert CONTRACT.validator(CONTRACT.value_schema("engram_memory_capture")).is_valid(value) is profile
