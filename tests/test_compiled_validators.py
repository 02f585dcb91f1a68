"""The compiled fast path (contract/_compiled.py) never passes a value the Python validator refuses, and the
oracle's verdicts are the ones the Python validator alone gives, on the inlined schemas it runs on as on the
referenced schema files: over every argument fixture, over generated mutations of them, and over binding claims."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engram_mcp.contract import ArgumentOracle, load
from engram_mcp.contract._loader import Contract

CONTRACT = load()
TOOLS = sorted(CONTRACT.tools)
CASES = [(tool, case) for tool in TOOLS for case in CONTRACT.fixture(f"arguments/{tool}.json")["cases"]]


class _PythonOnly(Contract):
    """The contract with the fast path turned off: every value goes through the Python validator."""

    def input_validity(self, tool: str) -> Any:  # type: ignore[override]  # a plain method stands in for the cached one
        return lambda value: False


class _Referenced(_PythonOnly):
    """The Python validator over the schema files as written, every reference looked up while validating."""

    def input_validator(self, tool: str) -> Any:  # type: ignore[override]  # a plain method stands in for the cached one
        return self.validator(self.input_schema(tool))


SLOW = ArgumentOracle(_PythonOnly())
FAST = ArgumentOracle(CONTRACT)
REFERENCED = ArgumentOracle(_Referenced())


def _agree(tool: str, arguments: Any) -> None:
    fast = CONTRACT.input_validity(tool)(arguments)
    valid = CONTRACT.input_validator(tool).is_valid(arguments)
    assert not fast or valid, "the compiled check passed arguments the schema refuses"
    assert FAST.verdict(tool, arguments) == SLOW.verdict(tool, arguments)
    # The inlined schema the Python validator runs on names the same rules, at the same paths, in the same order.
    assert SLOW.verdict(tool, arguments).violations == REFERENCED.verdict(tool, arguments).violations


@pytest.mark.parametrize(("tool", "case"), CASES, ids=[f"{t}:{c['description']}" for t, c in CASES])
def test_every_argument_fixture_gets_the_same_verdict(tool: str, case: dict[str, Any]) -> None:
    _agree(tool, case["arguments"])
    if case["valid"]:
        assert CONTRACT.input_validity(tool)(case["arguments"]), "a valid fixture missed the fast path"


# Values chosen where two regex engines or two JSON models could disagree.
_AWKWARD: st.SearchStrategy[Any] = st.sampled_from([
    "", "a\n", "sha256:" + "a" * 64 + "\n", "sha256:" + "a" * 63 + "\u0661", "mem_" + "a" * 52, "\u0661\u0662",
    "e\u0301", "\u00e9", "\U0001f600", "x" * 70000, "purpose:case", "2026-02-30T00:00:00.000Z",
    "2024-02-29T00:00:00.000Z", "component:decision", "citation:source", " ", "\t",
    0, -1, 1.0, 1.5, 2**53, 2**53 - 1, 2**64, -(2**63), True, False, None, [], {}, [1, 1.0], ["a", "a"],
])
_JSON = st.recursive(
    _AWKWARD | st.text(max_size=8) | st.integers() | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*path, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*path, i))
    return found


@st.composite
def _mutated(draw: st.DrawFn) -> tuple[str, Any]:
    tool, case = draw(st.sampled_from(CASES))
    arguments = copy.deepcopy(case["arguments"])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(arguments)))
        if not path:
            continue
        parent = arguments
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        # A drawn value is copied: _AWKWARD's lists and dicts are shared, and a later step of this loop may add
        # to one, which would change what every later example draws (hypothesis calls that flaky).
        if action == "delete" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(max_size=6))] = copy.deepcopy(draw(_JSON))
        else:
            parent[path[-1]] = copy.deepcopy(draw(_JSON))
    return tool, arguments


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_mutated())
def test_mutated_arguments_get_the_same_verdict(mutated: tuple[str, Any]) -> None:
    _agree(*mutated)


def test_generating_mutations_leaves_the_shared_values_as_they_were() -> None:
    """A mutation that added to one of _AWKWARD's lists or dicts changed what later examples drew, which hypothesis
    reports as a flaky strategy."""
    shared = [value for value in _AWKWARD.elements  # type: ignore[attr-defined]  # sampled_from's own attribute
              if isinstance(value, (dict, list))]
    before = copy.deepcopy(shared)

    @settings(max_examples=600, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck))
    @given(_mutated())
    def generate(mutated: tuple[str, Any]) -> None:
        pass

    generate()
    assert shared == before


def _claims() -> dict[str, Any]:
    return {"iss": "host:a", "aud": "server:a", "iat": 1_700_000_000, "exp": 1_700_000_060, "jti": "jti-1",
            "tenant": "tenant:a", "workspace": "ws:a", "principal": "p:a", "agent_id": "agent:a",
            "session": "s:a", "purpose_ref": "purpose:a", "audit_id": "audit_" + "0" * 32}


CLAIMS_SCHEMA = CONTRACT.data_schema("binding-claims")
CLAIMS_FAST, CLAIMS_FULL = CONTRACT.validity(CLAIMS_SCHEMA), CONTRACT.validator(CLAIMS_SCHEMA)


def test_well_formed_claims_take_the_fast_path() -> None:
    assert CLAIMS_FAST(_claims())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([*sorted(_claims()), "nbf", "deadline", "extra"]), _JSON, st.booleans())
def test_binding_claims_get_the_same_verdict(claim: str, value: Any, drop: bool) -> None:
    claims = _claims()
    if drop:
        claims.pop(claim, None)
    else:
        claims[claim] = value
    assert CLAIMS_FAST(claims) == CLAIMS_FULL.is_valid(claims) or not CLAIMS_FAST(claims)


def test_a_ref_beside_an_allof_is_left_to_the_referenced_schema() -> None:
    """Inlining keeps every keyword in its place; a $ref beside an allOf has none, so that schema is refused."""
    from engram_mcp.contract._bundle import inline_for_validation

    tree, origins = inline_for_validation({"$defs": {"s": {"type": "string"}}, "properties": {
        "a": {"$ref": "#/$defs/s"}, "b": {"$ref": "#/$defs/s", "maxLength": 2}}}, CONTRACT.registry)
    assert tree["properties"]["a"] == {"type": "string"} and "$defs" not in tree
    assert tree["properties"]["b"] == {"allOf": [{"type": "string"}], "maxLength": 2}
    assert origins[id(tree["properties"]["a"])] == {"type": "string"}
    with pytest.raises(ValueError, match="allOf"):
        inline_for_validation({"$defs": {"s": {}}, "$ref": "#/$defs/s", "allOf": [{}]}, CONTRACT.registry)
