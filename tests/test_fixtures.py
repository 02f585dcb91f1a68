"""The shipped fixtures: their shape, their verdicts, their coverage, their digests.

Every argument case in fixtures/arguments/ is judged by the argument oracle and
must get exactly the verdict the case states. Coverage tests make sure the
cases break every rule of spec/rules.json for every tool it applies to, put an
unknown field and a null into every closed object of every input schema, and
that the files on disk are what tools/make_fixtures.py builds.
"""

from __future__ import annotations

import importlib.util
import json
import unicodedata
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engram_mcp.contract import ArgumentOracle, binding, load
from engram_mcp.contract import _canonical as canonical
from engram_mcp.contract.binding import Binding
from engram_mcp.contract.validation import MEMO_MAX_CHARS

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = load()
TOOLS = tuple(CONTRACT.tools)
ARGUMENT_FILES = {tool: f"arguments/{tool}.json" for tool in TOOLS}
FIXTURES = {tool: CONTRACT.fixture(path) for tool, path in ARGUMENT_FILES.items()}
DIGESTS = CONTRACT.fixture("digests.json")
SIZE_LIMIT = 5 * 1024 * 1024
HOST_OWNED = (
    "tenant",
    "workspace",
    "scope",
    "principal",
    "agent_id",
    "session",
    "credential",
    "auditId",
    "deadline",
    "cancellation",
    "confirmation",
    "confirmed",
    "elicitationRef",
)


def _cases() -> Iterator[tuple[str, dict[str, Any]]]:
    for tool in TOOLS:
        for case in FIXTURES[tool]["cases"]:
            yield tool, case


CASES = list(_cases())
CASE_IDS = [f"{tool}: {case['description']}" for tool, case in CASES]


@pytest.fixture(scope="module")
def oracle() -> ArgumentOracle:
    return ArgumentOracle()


def parse_instant(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f%z")


# -- the files ----------------------------------------------------------------


def test_every_tool_has_a_fixture_file() -> None:
    on_disk = {p for p in CONTRACT.paths("fixtures") if p.startswith("arguments/")}
    assert on_disk == set(ARGUMENT_FILES.values())


@pytest.mark.parametrize("name", ["fixtures", "digests"])
def test_data_schema_is_a_closed_2020_12_schema(name: str) -> None:
    schema = CONTRACT.data_schema(name)
    Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == f"https://engram-mcp.invalid/schemas/1.0.0/data/{name}.schema.json"

    def objects(node: Any) -> Iterator[dict[str, Any]]:
        if isinstance(node, dict):
            if "properties" in node and node.get("type") == "object":
                yield node
            for value in node.values():
                yield from objects(value)
        elif isinstance(node, list):
            for value in node:
                yield from objects(value)

    for node in objects(schema):
        assert node.get("additionalProperties") is False, sorted(node["properties"])


@pytest.mark.parametrize("tool", TOOLS)
def test_argument_file_matches_its_schema(tool: str) -> None:
    document = FIXTURES[tool]
    errors = sorted(Draft202012Validator(CONTRACT.data_schema("fixtures")).iter_errors(document), key=str)
    assert not errors, errors[0]
    assert document["tool"] == tool


def test_digest_file_matches_its_schema() -> None:
    errors = sorted(Draft202012Validator(CONTRACT.data_schema("digests")).iter_errors(DIGESTS), key=str)
    assert not errors, errors[0]


@pytest.mark.parametrize("tool", TOOLS)
def test_descriptions_are_unique(tool: str) -> None:
    descriptions = [case["description"] for case in FIXTURES[tool]["cases"]]
    assert len(descriptions) == len(set(descriptions))


@pytest.mark.parametrize("path", sorted(CONTRACT.paths("fixtures")))
def test_file_is_small_utf8_json(path: str) -> None:
    raw = (ROOT / "fixtures" / path).read_bytes()
    assert len(raw) < SIZE_LIMIT
    assert json.loads(raw.decode("utf-8")) == CONTRACT.fixture(path)


@pytest.mark.parametrize("tool", TOOLS)
def test_lone_surrogates_survive_as_escapes(tool: str) -> None:
    raw = (ROOT / "fixtures" / ARGUMENT_FILES[tool]).read_text("utf-8")
    assert "\\ud800" in raw

    def has_lone_surrogate(node: Any) -> bool:
        if isinstance(node, str):
            return any(0xD800 <= ord(ch) <= 0xDFFF for ch in node)
        if isinstance(node, dict):
            return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in node.items())
        if isinstance(node, list):
            return any(has_lone_surrogate(v) for v in node)
        return False

    assert any(has_lone_surrogate(case["arguments"]) for case in FIXTURES[tool]["cases"])


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("make_fixtures", ROOT / "tools" / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    return _generator().build()


def test_generator_builds_exactly_the_shipped_files(generated: dict[str, str]) -> None:
    shipped = {f"fixtures/{p}" for p in CONTRACT.paths("fixtures") if p.endswith(".json")}
    assert set(generated) == shipped


@pytest.mark.parametrize("path", sorted(f"fixtures/{p}" for p in CONTRACT.paths("fixtures")))
def test_file_on_disk_is_what_the_generator_builds(path: str, generated: dict[str, str]) -> None:
    assert path in generated, "not built by tools/make_fixtures.py"
    assert (ROOT / path).read_bytes() == generated[path].encode("utf-8"), "run tools/make_fixtures.py"


# -- the verdicts -------------------------------------------------------------


@pytest.mark.parametrize(("tool", "case"), CASES, ids=CASE_IDS)
def test_case_verdict(oracle: ArgumentOracle, tool: str, case: dict[str, Any]) -> None:
    now = parse_instant(case["now"]) if "now" in case else None
    verdict = oracle.verdict(tool, case["arguments"], now=now)
    if case["valid"]:
        assert verdict.violations == (), [str(v) for v in verdict.violations]
        assert verdict.code is None
    else:
        assert sorted(verdict.rules) == sorted(case["breaks"]), [str(v) for v in verdict.violations]
        assert verdict.code == case["code"]


@pytest.mark.parametrize(
    ("tool", "case"),
    [c for c in CASES if not c[1]["valid"]],
    ids=[i for i, c in zip(CASE_IDS, CASES, strict=True) if not c[1]["valid"]],
)
def test_case_code_follows_rule_codes_and_precedence(tool: str, case: dict[str, Any]) -> None:
    rules = CONTRACT.rules
    assert set(case["breaks"]) <= set(rules), "unknown rule id"
    assert all(rules[rule].applies_to(tool) for rule in case["breaks"]), "rule does not apply to this tool"
    codes = {rules[rule].code for rule in case["breaks"]}
    assert case["code"] == next(code for code in CONTRACT.code_precedence if code in codes)


def test_clock_is_given_where_a_clock_rule_is_broken() -> None:
    clock_rules = {r.id for r in CONTRACT.rules.values() if r.needs_clock}
    for _, case in CASES:
        if clock_rules & set(case.get("breaks", ())):
            assert "now" in case, case["description"]


# -- coverage -----------------------------------------------------------------

RULE_TOOL_PAIRS = [
    (rule.id, tool) for rule in CONTRACT.rules.values() for tool in TOOLS if rule.applies_to(tool)
]


@pytest.mark.parametrize(("rule", "tool"), RULE_TOOL_PAIRS, ids=[f"{r} in {t}" for r, t in RULE_TOOL_PAIRS])
def test_rule_is_broken_for_every_tool_it_applies_to(rule: str, tool: str) -> None:
    assert any(rule in case.get("breaks", ()) for case in FIXTURES[tool]["cases"])


# An event citation that names no citation is either outside the primary
# component or named by it, and then a component citation fails to resolve too.
NEVER_ALONE = {
    "primary_event_citation_resolves": [
        ["primary_event_citation_in_primary_component", "primary_event_citation_resolves"],
        ["component_citations_resolve", "primary_event_citation_resolves"],
    ],
}


@pytest.mark.parametrize("rule", sorted(CONTRACT.rules))
def test_rule_is_broken_alone_somewhere(rule: str) -> None:
    for breaks in NEVER_ALONE.get(rule, [[rule]]):
        assert any(case.get("breaks") == breaks for _, case in CASES), breaks


@pytest.mark.parametrize("tool", TOOLS)
def test_tool_has_valid_and_invalid_cases(tool: str) -> None:
    valid = [case for case in FIXTURES[tool]["cases"] if case["valid"]]
    assert len(valid) >= 1 and len(valid) < len(FIXTURES[tool]["cases"])


def _resolved(tool: str) -> tuple[dict[str, Any], Any]:
    resolver = CONTRACT.registry.resolver(base_uri=CONTRACT.schema_uri(f"tools/{tool}.input.json"))
    return CONTRACT.input_schema(tool), resolver


def _deref(schema: Any, resolver: Any) -> tuple[Any, Any]:
    while isinstance(schema, dict) and "$ref" in schema:
        resolved = resolver.lookup(schema["$ref"])
        schema, resolver = resolved.contents, resolved.resolver
    return schema, resolver


def closed_objects(schema: Any, resolver: Any, where: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(location, schema) of every closed object schema; array items are written '*'."""
    schema, resolver = _deref(schema, resolver)
    if not isinstance(schema, dict):
        return
    if schema.get("additionalProperties") is False:
        yield where, schema
    for name, sub in schema.get("properties", {}).items():
        yield from closed_objects(sub, resolver, f"{where}/{name}")
    if "items" in schema:
        yield from closed_objects(schema["items"], resolver, f"{where}/*")


def instance_objects(
    schema: Any, resolver: Any, instance: Any, where: str = ""
) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(location, schema, object) for every object of the instance that a closed schema describes."""
    schema, resolver = _deref(schema, resolver)
    if not isinstance(schema, dict):
        return
    if schema.get("additionalProperties") is False and isinstance(instance, dict):
        yield where, schema, instance
    if isinstance(instance, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in instance:
                yield from instance_objects(sub, resolver, instance[name], f"{where}/{name}")
    if "items" in schema and isinstance(instance, list):
        for item in instance:
            yield from instance_objects(schema["items"], resolver, item, f"{where}/*")


def _locations(tool: str) -> list[str]:
    return [where for where, _ in closed_objects(*_resolved(tool))]


def _members(tool: str) -> list[tuple[str, str]]:
    return [(where, name) for where, schema in closed_objects(*_resolved(tool)) for name in schema["properties"]]


LOCATIONS = [(tool, where) for tool in TOOLS for where in _locations(tool)]
MEMBERS = [(tool, where, name) for tool in TOOLS for where, name in _members(tool)]


def test_closed_object_locations_are_known() -> None:
    assert ("engram_memory_capture", "/payload/citations/*/locator") in LOCATIONS
    assert ("engram_memory_search", "/capability_policy") in LOCATIONS
    assert len([t for t, _ in LOCATIONS if t == "engram_memory_capture"]) == 10


@pytest.mark.parametrize(("tool", "where"), LOCATIONS, ids=[f"{t} {w or '/'}" for t, w in LOCATIONS])
def test_every_closed_object_gets_an_unknown_field(tool: str, where: str) -> None:
    schema, resolver = _resolved(tool)
    for case in FIXTURES[tool]["cases"]:
        if case["valid"] or "closed_schema" not in case["breaks"]:
            continue
        for location, sub, obj in instance_objects(schema, resolver, case["arguments"]):
            if location == where and set(obj) - set(sub.get("properties", {})):
                return
    pytest.fail(f"no case puts an unknown field at {where or '/'}")


@pytest.mark.parametrize(("tool", "where", "name"), MEMBERS, ids=[f"{t} {w}/{n}" for t, w, n in MEMBERS])
def test_every_member_is_sent_as_null(tool: str, where: str, name: str) -> None:
    schema, resolver = _resolved(tool)
    for case in FIXTURES[tool]["cases"]:
        if case["valid"]:
            continue
        for location, _, obj in instance_objects(schema, resolver, case["arguments"]):
            if location == where and name in obj and obj[name] is None:
                return
    pytest.fail(f"no case sends {where}/{name} as null")


@pytest.mark.parametrize("tool", TOOLS)
@pytest.mark.parametrize("name", HOST_OWNED)
def test_every_host_owned_name_is_refused_at_the_top_level(tool: str, name: str) -> None:
    assert any(
        not case["valid"]
        and case["breaks"] == ["closed_schema"]
        and isinstance(case["arguments"], dict)
        and name in case["arguments"]
        for case in FIXTURES[tool]["cases"]
    )


# -- the digests ----------------------------------------------------------------


def _operation_digest(given: dict[str, Any]) -> str:
    """A host's computation of the operation digest, from the bound scope and principal alone."""
    bound = Binding(tenant=given["tenant"], workspace=given["workspace"], principal=given["principal"],
                    agent_id="-", session="-", purpose_ref="-", issuer="-", audience="-", issued_at=0, expires_at=0,
                    token_id="-")
    tool, arguments = given["tool"], given["arguments"]
    return binding.operation_digest(tool, binding.operation_target(tool, arguments), arguments, bound)


CALLS = {
    "payload_digest": lambda i: canonical.payload_digest(i["payload"]),
    "record_digest": lambda i: canonical.record_digest(i["record"]),
    "record_id": lambda i: canonical.record_id(i["record_digest"]),
    "candidate_id": lambda i: canonical.candidate_id(i["source_ref"], i["sequence"], i["idempotency_key"]),
    "receipt_digest": lambda i: canonical.receipt_digest(i["kind"], i["value"], i.get("field", "receipt_digest")),
    "digest": lambda i: canonical.digest(i["domain"], i["value"]),
    "operation_digest": _operation_digest,
}
VECTORS = DIGESTS["vectors"]


@pytest.mark.parametrize("vector", VECTORS, ids=[v["description"] for v in VECTORS])
def test_digest_vector(vector: dict[str, Any]) -> None:
    assert CALLS[vector["function"]](vector["input"]) == vector["expected"]


def test_digest_vectors_include_the_upstream_golden() -> None:
    golden = "sha256:df5abcbf1d1091794c1f37efcd89e5f7bd6b91afa631e29f084178d35c55e913"
    assert any(
        v["function"] == "payload_digest" and v["expected"] == golden and "scope_ref" in v["input"]["payload"]
        for v in VECTORS
    )


def test_operation_digest_vectors_describe_calls_a_server_would_run(oracle: ArgumentOracle) -> None:
    vectors = [v for v in VECTORS if v["function"] == "operation_digest"]
    assert vectors
    for vector in vectors:
        given = vector["input"]
        assert oracle.verdict(given["tool"], given["arguments"]).valid, vector["description"]
        assert CONTRACT.tools[given["tool"]].target is not None


def test_digest_vectors_cover_every_function() -> None:
    assert {v["function"] for v in VECTORS} == set(CALLS)


def test_nfd_and_nfc_inputs_share_a_digest() -> None:
    def text(vector: dict[str, Any]) -> str:
        return json.dumps(vector["input"], ensure_ascii=False)

    def is_nfc(vector: dict[str, Any]) -> bool:
        return unicodedata.is_normalized("NFC", text(vector))

    paired = {
        a["function"]
        for a in VECTORS
        for b in VECTORS
        if not is_nfc(a) and is_nfc(b) and a["function"] == b["function"] and a["expected"] == b["expected"]
    }
    assert paired >= {"payload_digest", "candidate_id"}


def test_a_remembered_verdict_is_the_verdict_judged_afresh() -> None:
    """The oracle remembers recent clock-free verdicts: every fixture case, judged twice by one oracle, gets the
    same verdict a new oracle gives, and the second time is the remembered one."""
    remembering = ArgumentOracle()
    for tool, case in CASES:
        first = remembering.verdict(tool, case["arguments"])
        again = remembering.verdict(tool, case["arguments"])
        assert again is first or len(json.dumps(case["arguments"], ensure_ascii=False)) > MEMO_MAX_CHARS, \
            case["description"]
        assert again == ArgumentOracle().verdict(tool, case["arguments"]), case["description"]


def test_a_lone_surrogate_pair_is_not_remembered_as_the_character_it_spells(oracle: ArgumentOracle) -> None:
    tool, case = next((t, c) for t, c in CASES if oracle.verdict(t, c["arguments"]).valid
                      and any(isinstance(v, str) for v in c["arguments"].values()))
    field = next(k for k, v in case["arguments"].items() if isinstance(v, str))
    astral = {**case["arguments"], field: "\U0001F600"}
    spelt = {**case["arguments"], field: "\ud83d\ude00"}  # two code points that are no Unicode scalars
    judged = [oracle.verdict(tool, astral), oracle.verdict(tool, spelt)]
    assert "unicode_scalars" in {v.rule for v in judged[1].violations}
    assert "unicode_scalars" not in {v.rule for v in judged[0].violations}
