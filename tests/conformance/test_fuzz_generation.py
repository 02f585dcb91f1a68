"""The argument cases of the conformance suite, judged without any target.

engram_mcp.conformance._fuzz builds the cases the argument checks send. These
tests pin what the checks rely on: drawing is the same for the same seed, every
case carries the oracle's verdict and means what its generator says, the
host-owned battery reaches every object level, the size cases measure exactly
what they claim, and the rewrites applied just before sending (bound purpose,
fresh idempotency keys) never change a verdict.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import pkgutil
import subprocess
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance import _fuzz as fuzz
from engram_mcp.conformance._fuzz import families, registry
from engram_mcp.contract import ArgumentOracle, load

CONTRACT = load()
TOOLS = fuzz.TOOLS
ORACLE = ArgumentOracle()
EXAMPLES = 8  # enough to exercise every code path, small enough to keep the suite fast
MUTATORS = tuple(fuzz.FAMILIES)
ROOT = Path(__file__).resolve().parents[2]


def _same(a: list[fuzz.Case], b: list[fuzz.Case]) -> bool:
    def dump(cases: list[fuzz.Case]) -> str:
        return json.dumps([case.as_json() for case in cases], ensure_ascii=True, sort_keys=True)

    return dump(a) == dump(b)


# -- schema-driven drawing ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["positive", "negative"])
@pytest.mark.parametrize("tool", TOOLS)
def test_drawing_is_the_same_for_the_same_seed(tool: str, mode: str) -> None:
    fuzz._drawn.cache_clear()
    first = fuzz.schemathesis_cases(tool, mode, seed=11, examples=EXAMPLES)
    fuzz._drawn.cache_clear()
    again = fuzz.schemathesis_cases(tool, mode, seed=11, examples=EXAMPLES)
    assert first and _same(first, again)


def test_another_seed_draws_other_cases() -> None:
    one = fuzz.schemathesis_cases(fuzz.CAPTURE, "positive", seed=1, examples=EXAMPLES)
    two = fuzz.schemathesis_cases(fuzz.CAPTURE, "positive", seed=2, examples=EXAMPLES)
    assert not _same(one, two)


@pytest.mark.parametrize("tool", TOOLS)
def test_positive_cases_are_oracle_valid(tool: str) -> None:
    cases = fuzz.schemathesis_cases(tool, "positive", seed=3, examples=EXAMPLES)
    assert cases, "repair should keep most drawn bodies"
    for case in cases:
        verdict = ORACLE.verdict(tool, case.arguments, now=fuzz.utc_now())
        assert verdict.valid, f"{case.label}: {sorted(verdict.rules)}"
        assert case.valid and case.code is None and not case.unsendable


@pytest.mark.parametrize("tool", TOOLS)
def test_positive_cases_carry_the_bound_purpose(tool: str) -> None:
    path = fuzz.purpose_path(tool)
    if path is None:
        pytest.skip(f"{tool} has no purpose argument")
    for case in fuzz.schemathesis_cases(tool, "positive", seed=3, examples=EXAMPLES, purpose="purpose:bound"):
        assert fuzz.get_at(case.arguments, path) == "purpose:bound"


@pytest.mark.parametrize("tool", TOOLS)
def test_negative_cases_are_oracle_invalid(tool: str) -> None:
    cases = fuzz.schemathesis_cases(tool, "negative", seed=3, examples=EXAMPLES)
    assert cases
    for case in cases:
        assert not case.valid and case.code in ("INVALID_SCHEMA", "INVALID_DIGEST")
        if not isinstance(case.arguments, bytes):
            verdict = ORACLE.verdict(tool, case.arguments, now=fuzz.utc_now())
            assert not verdict.valid and verdict.code == case.code, case.label


def test_repair_fixes_what_a_schema_generator_cannot_see() -> None:
    base = fuzz.base_arguments(fuzz.CAPTURE)
    broken = fuzz.put(base, ("payload", "purpose_ref"), "caf" + fuzz.NFD_E)
    broken = fuzz.put(broken, ("idempotency_key",), "short")
    broken = fuzz.put(broken, ("payload", "primary_component_id"), "component:elsewhere")
    broken = fuzz.put(broken, ("evidence", "citation_ids"), ["citation:missing"])
    broken = fuzz.put(broken, ("payload", "reconciliation", "family_refs"), ["family:b", "family:a"])
    broken = fuzz.put(broken, ("payload", "valid_time"), {"t": 10, "t_end": 5})
    broken = fuzz.put(broken, ("payload", "retention"),
                      {"derivative_rule": "retain", "expires_at": "2001-02-30T25:00:00.000Z"})
    broken = fuzz.put(broken, ("payload", "components", 0, "text"), fuzz.WIDE[4] * 20000)
    assert not ORACLE.verdict(fuzz.CAPTURE, broken, now=fuzz.utc_now()).valid
    repaired = fuzz.repair(fuzz.CAPTURE, broken, purpose="purpose:bound")
    assert repaired is not None
    assert ORACLE.verdict(fuzz.CAPTURE, repaired, now=fuzz.utc_now()).valid
    assert repaired["payload"]["purpose_ref"] == "purpose:bound"
    assert repaired["payload"]["reconciliation"]["family_refs"] == ["family:a", "family:b"]


# -- deterministic mutators -------------------------------------------------------------------------


@pytest.mark.parametrize("family", MUTATORS)
@pytest.mark.parametrize("tool", TOOLS)
def test_every_mutated_case_means_what_its_generator_says(family: str, tool: str) -> None:
    now = fuzz.utc_now()
    cases = fuzz.cases(family, tool, now=now)
    first = fuzz.cases(family, tool, now=now)
    assert _same(cases, first), "mutators are deterministic"
    for case in cases:
        assert case.family == family and case.tool == tool
        assert case.intent is not None, f"{case.label}: the generator states no intent"
        verdict = ORACLE.verdict(tool, case.arguments, now=now)
        assert verdict.valid == case.valid == case.intent, f"{family} {tool}: {case.label}: {sorted(verdict.rules)}"
        assert verdict.code == case.code


@pytest.mark.parametrize("tool", TOOLS)
def test_the_bases_are_valid_and_hold_every_optional_member(tool: str) -> None:
    base = fuzz.base_arguments(tool)
    assert ORACLE.verdict(tool, base, now=fuzz.utc_now()).valid
    for path in fuzz.object_paths(base):
        schema = fuzz.schema_at(tool, path)
        present = set(fuzz.get_at(base, path))
        missing = set(schema.get("properties", {})) - present
        if tool == fuzz.SEARCH and path == ():
            missing.discard("page_cursor")  # added by the families that need it
        if tool == fuzz.CAPTURE and path == ("payload", "retention"):
            missing.discard("expires_at")  # any expiry meets the host's ceiling; the instants family sets one
        assert not missing, f"{tool} {fuzz.label_of(path)} lacks {sorted(missing)}"


@pytest.mark.parametrize("tool", TOOLS)
def test_every_host_owned_name_is_injected_at_every_object_level(tool: str) -> None:
    base = fuzz.base_arguments(tool)
    injected: set[tuple[tuple[Any, ...], str]] = set()
    for case in fuzz.host_owned_cases(tool):
        assert not case.valid and case.code == "INVALID_SCHEMA" and "closed_schema" in case.rules, case.label
        for level in fuzz.object_paths(base):
            node = fuzz.get_at(case.arguments, level)
            extra = set(node) - set(fuzz.get_at(base, level))
            injected |= {(level, name) for name in extra}
    levels = fuzz.object_paths(base)
    assert len(levels) >= 1
    for level in levels:
        for name in fuzz.HOST_OWNED_NAMES:
            assert (level, name) in injected, f"{tool}: {name} is never injected in {fuzz.label_of(level)}"
    named = ("tenant", "workspace", "scope", "principal", "agent_id", "session", "credential", "auditId", "deadline",
             "cancellation", "confirmation", "confirmed", "elicitationRef", "trust", "decision", "status")
    assert set(named) <= set(fuzz.HOST_OWNED_NAMES)


def test_capture_has_every_object_level_of_its_schema() -> None:
    labels = {fuzz.label_of(level) for level in fuzz.object_paths(fuzz.base_arguments(fuzz.CAPTURE))}
    assert labels >= {"(arguments)", "payload", "payload.valid_time", "payload.components[0]", "payload.primary_event",
                      "payload.citations[0]", "payload.citations[0].locator", "payload.retention",
                      "payload.reconciliation", "evidence"}


@pytest.mark.parametrize("tool", TOOLS)
def test_null_reaches_every_member(tool: str) -> None:
    base = fuzz.base_arguments(tool)
    nulled = {case.label for case in fuzz.null_cases(tool)}
    for path in fuzz.member_paths(base):
        assert f"{fuzz.label_of(path)}: null" in nulled


@pytest.mark.parametrize("filler", list(fuzz.FILLERS))
def test_the_size_cases_measure_exactly_what_they_claim(filler: str) -> None:
    limit = CONTRACT.limit("arguments.max_bytes")
    assert limit == 1_048_576
    exact = fuzz.sized_capture(limit, filler)
    over = fuzz.sized_capture(limit + 1, filler)
    assert fuzz.canonical_size(exact) == 1_048_576
    assert fuzz.canonical_size(over) == 1_048_577
    assert ORACLE.verdict(fuzz.CAPTURE, exact, now=fuzz.utc_now()).valid
    verdict = ORACLE.verdict(fuzz.CAPTURE, over, now=fuzz.utc_now())
    assert verdict.rules == {"arguments_size"} and verdict.code == "INVALID_SCHEMA"


def test_the_size_family_holds_the_limit_and_one_byte_more() -> None:
    limit = CONTRACT.limit("arguments.max_bytes")
    sizes = {fuzz.canonical_size(case.arguments): case.valid for case in fuzz.size_cases(fuzz.CAPTURE)}
    assert sizes == {limit: True, limit + 1: False}
    for tool in TOOLS:
        for case in fuzz.size_cases(tool):
            size = fuzz.canonical_size(case.arguments)
            assert size in (limit, limit + 1)
            assert case.valid == (size == limit)


def test_utf8_boundaries_sit_on_the_byte_bounds() -> None:
    for case in fuzz.utf8_cases(fuzz.SEARCH):
        query = case.arguments["query"]
        if case.label.startswith("query:"):
            size = len(query.encode("utf-8"))
            assert size in (1, 4, 8192, 8193) or query == ""
            assert case.valid == (1 <= size <= 8192)
    assert fuzz.fill(512, 4) == fuzz.WIDE[4] * 128
    assert len(fuzz.fill(513, 3).encode("utf-8")) == 513


def test_lone_surrogate_cases_are_flagged_as_unsendable() -> None:
    cases = fuzz.surrogate_cases(fuzz.CAPTURE)
    assert cases and all(case.unsendable and not case.valid for case in cases)
    assert all("unicode_scalars" in case.rules for case in cases)


def test_unsendable_arguments_are_recognised() -> None:
    assert fuzz.unsendable(b"\x00{") is not None
    assert fuzz.unsendable({"a": "x\ud800"}) is not None
    assert fuzz.unsendable({"k\udc00": 1}) is not None
    assert fuzz.unsendable({"t": float("nan")}) is not None
    assert fuzz.unsendable({"t": 1.0, "s": "caf\u00e9", "l": [2**64]}) is None
    # The reason names what is wrong, whichever way it was found.
    assert fuzz.unsendable({"deep": [{"x": "\ud800"}]}) == fuzz.LONE_SURROGATE
    assert "non-finite" in (fuzz.unsendable({"deep": [1, float("-inf")]}) or "")
    assert "non-finite" in (fuzz.unsendable({float("nan"): 1}) or "")
    assert fuzz.unsendable({"set": {1, 2}}) is None  # not JSON, yet nothing the SDK would mangle silently


# -- rewrites applied just before sending ---------------------------------------------------------


@pytest.mark.parametrize("tool", TOOLS)
def test_binding_the_purpose_never_changes_a_fixture_verdict(tool: str) -> None:
    now = fuzz.utc_now()
    for case in fuzz.fixture_cases(tool, everything=True):
        if case.unsendable:
            continue
        bound = fuzz.bind_purpose(tool, case.arguments, "purpose:conformance", only=fuzz.FIXTURE_PURPOSE)
        before = ORACLE.verdict(tool, case.arguments, now=now)
        after = ORACLE.verdict(tool, bound, now=now)
        assert (before.valid, before.code) == (after.valid, after.code), case.label


def test_binding_the_purpose_keeps_a_case_about_the_purpose() -> None:
    args = {"query": "q", "purpose_ref": "caf" + fuzz.NFD_E}
    assert fuzz.bind_purpose(fuzz.SEARCH, args, "purpose:conformance") is args
    limit = CONTRACT.limit("arguments.max_bytes")
    near = fuzz.sized_capture(limit)
    near["payload"]["purpose_ref"] = "p"
    room = limit - fuzz.canonical_size(near)
    assert fuzz.bind_purpose(fuzz.CAPTURE, near, "p" * (room + 2)) is near  # one byte over: kept as it is
    bound = fuzz.bind_purpose(fuzz.CAPTURE, near, "p" * (room + 1))  # exactly at the limit: bound
    assert fuzz.canonical_size(bound) == limit


@pytest.mark.parametrize("key", ["0123456789abcdef", fuzz.WIDE[4] * 4, fuzz.WIDE[2] * 128, fuzz.WIDE[3] * 5 + "k",
                                 "conformance-fuzz-capture-0001"])
def test_salted_keys_keep_their_bytes_and_their_form(key: str) -> None:
    salted = fuzz.salted_key(key, "salt-1")
    assert salted != key
    assert [len(c.encode()) for c in salted] == [len(c.encode()) for c in key]
    assert unicodedata.is_normalized("NFC", salted)
    assert fuzz.salted_key(key, "salt-1") == salted
    assert fuzz.salted_key(key, "salt-2") != salted


def test_a_non_nfc_key_is_not_salted() -> None:
    key = "cl" + fuzz.NFD_E + "-idempotence-0001"
    assert fuzz.salted_key(key, "salt") == key


def test_salting_keeps_every_valid_fixture_valid() -> None:
    now = fuzz.utc_now()
    for tool in (fuzz.CAPTURE, fuzz.ADMIT, fuzz.WITHDRAW, fuzz.FORGET):
        for case in fuzz.fixture_cases(tool, everything=True):
            if case.valid and not case.unsendable:
                salted = fuzz.with_salted_key(tool, case.arguments, "salt")
                assert ORACLE.verdict(tool, salted, now=now).code == ORACLE.verdict(tool, case.arguments, now=now).code


# -- inspection -------------------------------------------------------------------------------------


def test_the_corpus_leaves_out_only_cases_the_size_families_cover() -> None:
    for tool in TOOLS:
        kept = {case.label for case in fuzz.fixture_cases(tool)}
        for case in fuzz.fixture_cases(tool, everything=True):
            if case.label not in kept:
                assert fuzz.canonical_size(case.arguments) > fuzz.FIXTURE_SIZE_CAP, case.label


def test_cases_survive_their_json_form() -> None:
    cases = [*fuzz.surrogate_cases(fuzz.SEARCH), *fuzz.integer_cases(fuzz.CAPTURE), *fuzz.non_object_cases(fuzz.GET),
             fuzz.Case("x", fuzz.GET, "bytes", b"\xff\x00", False, "INVALID_SCHEMA", (), False)]
    for case in cases:
        back = fuzz.Case.from_json(json.loads(json.dumps(case.as_json(), ensure_ascii=True)))
        assert back.as_json() == case.as_json()
        assert repr(back.arguments) == repr(case.arguments)


def test_the_inspection_command_prints_one_case_a_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.main(["--tool", fuzz.GET, "--family", "null", "--family", "non-object"]) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = len(fuzz.null_cases(fuzz.GET)) + len(fuzz.non_object_cases(fuzz.GET))
    assert len(lines) == expected
    assert {json.loads(line)["family"] for line in lines} == {"null", "non-object"}


def test_marker_cases_plant_the_marker_in_every_free_string() -> None:
    marker = "zqmark0000abcdef"
    for tool in TOOLS:
        planted = fuzz.marker_cases(tool, marker)
        assert planted and all(marker in json.dumps(p.arguments) for p in planted)
        full = [p for p in planted if p.label == "the marker in every free field"]
        if tool != fuzz.GET:
            assert full and full[0].valid
            args = full[0].arguments
            free = [path for path in fuzz.string_paths(args) if path != fuzz.purpose_path(tool)
                    and (fuzz.is_free_text(tool, path) or fuzz.is_nfc_field(tool, path))]
            assert free and all(fuzz.get_at(args, path).startswith(marker) for path in free)



# -- the package: one module per family, registered by a decorator -------------------------------------


def _family_modules() -> list[Any]:
    return [importlib.import_module(f"{families.__name__}.{info.name}")
            for info in pkgutil.iter_modules(families.__path__)]


def test_every_family_module_registers_its_own_generator_under_its_name() -> None:
    registered = {}
    for module in _family_modules():
        name = getattr(module, "FAMILY", None)
        if name is None:  # the corpus and the drawn families are called by name, not registered
            continue
        generator = fuzz.FAMILIES[name]
        assert generator.__module__ == module.__name__, f"{name} is served by {generator.__module__}"
        registered[name] = module.__name__
    assert set(registered) == set(fuzz.FAMILIES), "a registered family has no module of its own"
    listed = ("fixtures", "schemathesis-positive", "schemathesis-negative", *fuzz.FAMILIES)
    assert listed == fuzz.ALL_FAMILIES


@pytest.mark.parametrize("family", MUTATORS)
def test_a_family_labels_its_cases_with_its_own_name(family: str) -> None:
    built = [case for tool in TOOLS for case in fuzz.cases(family, tool)]
    assert built and {case.family for case in built} == {family}


def test_a_family_name_cannot_be_registered_twice() -> None:
    before = dict(fuzz.FAMILIES)
    with pytest.raises(ValueError, match="registered twice"):
        registry.family("null")(fuzz.required_cases)
    assert before == fuzz.FAMILIES


def test_a_family_for_some_tools_gives_the_others_nothing() -> None:
    asked: list[str] = []

    def probe(tool: str, *, purpose: str = fuzz.DEFAULT_PURPOSE, now: Any = None) -> list[fuzz.Case]:
        asked.append(tool)
        return [fuzz.judged("probe", tool, "the base", fuzz.base_arguments(tool, purpose), now=now)]

    registered = registry.family("probe", tools=(fuzz.CAPTURE,))(probe)
    try:
        assert fuzz.FAMILIES["probe"] is registered
        assert [registered(tool) for tool in TOOLS if tool != fuzz.CAPTURE] == [[]] * (len(TOOLS) - 1)
        assert [case.tool for case in fuzz.cases("probe", fuzz.CAPTURE)] == [fuzz.CAPTURE]
        assert asked == [fuzz.CAPTURE]
    finally:
        del fuzz.FAMILIES["probe"]


def test_the_package_runs_as_the_inspection_command() -> None:
    """The suite draws its schema-driven cases through this very command, in a child process."""
    command = [sys.executable, "-m", "engram_mcp.conformance._fuzz", "--full", "--tool", fuzz.GET, "--family", "nfc"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    printed = [fuzz.Case.from_json(json.loads(line)) for line in done.stdout.splitlines()]
    assert [case.as_json() for case in printed] == [case.as_json() for case in fuzz.cases("nfc", fuzz.GET)]


def test_the_fixture_builder_edits_cases_with_the_fuzzers_path_helpers() -> None:
    """One implementation of the path edits both corpora are written with (the builder's own copies are gone)."""
    spec = importlib.util.spec_from_file_location("make_fixtures_shared", ROOT / "tools" / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    assert all(getattr(builder, name) is getattr(fuzz, name) for name in ("put", "drop", "edit", "rename"))
    assert builder.label is fuzz.label_of
