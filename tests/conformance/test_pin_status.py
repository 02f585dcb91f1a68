"""PIN: a check whose failing calls broke only this project's pins, shown as such at the contract level.

At ``--level contract`` such a result is no failure: the run can still be conformant, the requirement it
asserted is not judged at that level, and every report names it apart (console, JUnit as skipped with the pins,
report.jsonl). At ``--level pins`` the same result is a FAIL.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

from engram_mcp.conformance._checks import SOURCES_SCORED, Status
from engram_mcp.conformance._defaults import EXIT_MUST_FAILED
from engram_mcp.conformance._findings import (
    BROKEN_REQUIREMENTS,
    MODEL_BLAME_ALONE,
    blamed,
    leveled,
    requirement_outcomes,
)
from engram_mcp.conformance._junit import junit_report
from engram_mcp.conformance._report import write_reports
from engram_mcp.conformance._run import Result, Run
from engram_mcp.conformance._verdicts import exit_code
from engram_mcp.contract import load
from tests.conformance.test_junit import all_passing, bare_run

CATALOG = {entry["id"]: entry for entry in load().requirements["requirements"]}
PROFILE_ONLY = "EMC-IDEM-012"  # which refusal wins when a key conflicts and the target forbids the call
CONTRACT_REQ = "EMC-IDEM-007"


def pinned_only() -> Result:
    """The check's own assertions held; only the profile's pin did not (the contract allows either refusal)."""
    return Result("idempotency.digest-conflict", (CONTRACT_REQ, PROFILE_ONLY), "legacy", Status.PASS, "n", 0.1,
                  "", {}, pins={PROFILE_ONLY: ["the conflicting withdraw was refused NOT_FOUND, not DIGEST_CONFLICT"]},
                  case="withdraw-reason")


def failed_on(*broken: str) -> Result:
    """The contract model found the answer wrong, naming ``broken``."""
    return Result("idempotency.digest-conflict", (CONTRACT_REQ, PROFILE_ONLY), "legacy", Status.FAIL, "n", 0.1,
                  "the conflicting withdraw was answered as a replay", {BROKEN_REQUIREMENTS: list(broken)},
                  case="withdraw-reason")


def test_the_catalog_sources_are_what_the_tests_assume() -> None:
    assert CATALOG[PROFILE_ONLY]["source"] == "pin"
    assert CATALOG[CONTRACT_REQ]["source"] == "contract"


def test_a_failure_on_profile_pins_alone_is_a_pin_at_the_contract_level_and_a_fail_at_the_profile_level() -> None:
    result = pinned_only()
    assert blamed(result) == (PROFILE_ONLY,)
    assert leveled(result, SOURCES_SCORED["contract"]) is Status.PIN
    assert leveled(result, SOURCES_SCORED["pins"]) is Status.FAIL


def test_a_failure_that_breaks_the_contract_stays_a_fail_at_either_level() -> None:
    result = failed_on(CONTRACT_REQ)
    assert leveled(result, SOURCES_SCORED["contract"]) is Status.FAIL
    assert leveled(result, SOURCES_SCORED["pins"]) is Status.FAIL


def test_a_pin_leaves_the_contract_requirement_passed_and_blames_the_pinned_one() -> None:
    pinned = pinned_only()
    pinned.raw, pinned.status = pinned.status, Status.PIN
    outcomes = requirement_outcomes(pinned)
    assert outcomes[CONTRACT_REQ][0] is Status.PASS
    assert outcomes[PROFILE_ONLY][0] is Status.FAIL


def _pinned_run(tmp_path: Path) -> tuple[Run, Result]:
    pinned = pinned_only()
    pinned.raw, pinned.status = pinned.status, Status.PIN
    run = bare_run([*all_passing(), pinned])
    run.report_dir = tmp_path
    return run, pinned


def test_a_run_whose_only_findings_are_pins_does_not_fail_at_the_contract_level(tmp_path: Path) -> None:
    run, _ = _pinned_run(tmp_path)
    assert exit_code(run) != EXIT_MUST_FAILED
    failing = bare_run([*all_passing(), failed_on(CONTRACT_REQ)])
    assert blamed(failed_on(CONTRACT_REQ)) == (CONTRACT_REQ, PROFILE_ONLY)  # the model's, and the check's own
    assert exit_code(failing) == EXIT_MUST_FAILED


def test_junit_shows_a_pin_as_skipped_naming_its_pins(tmp_path: Path) -> None:
    run, pinned = _pinned_run(tmp_path)
    root = ET.fromstring(junit_report(run, exit_code(run)))
    case = next(c for c in root.iter("testcase") if c.get("name") == pinned.label)
    skipped = case.find("skipped")
    assert case.find("failure") is None and skipped is not None
    assert skipped.get("message", "").startswith(f"PIN ({PROFILE_ONLY};")


def test_report_jsonl_keeps_the_pin_and_what_the_check_asserted(tmp_path: Path) -> None:
    run, pinned = _pinned_run(tmp_path)
    write_reports(run, tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text().splitlines()]
    row = next(r for r in rows if r.get("check") == pinned.check_id and r.get("status") == "PIN")
    assert row["asserted"] == "PASS" and row["blamed"] == [PROFILE_ONLY]
    html = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "Pins" in html and "data-group='pin'" in html


def test_the_json_summary_names_the_pins_and_stays_conformant(tmp_path: Path) -> None:
    from engram_mcp.conformance._cli import summary_json

    run, pinned = _pinned_run(tmp_path)
    summary = summary_json(run, exit_code(run), None)
    assert summary["pinned"] == {pinned.label: [PROFILE_ONLY]}
    assert summary["counts"].get("PIN") == 1 and summary["conformant"] is True


def test_a_check_whose_requirements_are_alternatives_leaves_the_blame_to_the_model() -> None:
    chosen = failed_on(CONTRACT_REQ)
    chosen.evidence[MODEL_BLAME_ALONE] = True
    assert blamed(chosen) == (CONTRACT_REQ,)
