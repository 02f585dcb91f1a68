"""The verdict cannot overstate: levels, exercised MUSTs per era, partial runs and the summary arithmetic."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance import _checks
from engram_mcp.conformance._checks import SOURCES_SCORED, Status, check
from engram_mcp.conformance._connect import Era, parse_target
from engram_mcp.conformance._defaults import EXIT_CONFORMANT, EXIT_INCOMPLETE, EXIT_MUST_FAILED
from engram_mcp.conformance._report import badge, write_reports
from engram_mcp.conformance._run import Result, Run
from engram_mcp.conformance._verdicts import (
    NOT_APPLICABLE,
    NOT_EXERCISED,
    PASSED,
    exit_code,
    requirement_verdicts,
    summary_lines,
    tally,
)
from engram_mcp.contract import load

CATALOG = {r["id"]: r for r in load().requirements["requirements"]}
ERAS: tuple[Era, ...] = ("legacy", "modern")


def scored_musts(level: str) -> list[str]:
    return sorted(rid for rid, r in CATALOG.items()
                  if r["level"] in ("MUST", "MUST NOT") and r["status"] == "established"
                  and r["source"] in SOURCES_SCORED[level])


def observable(level: str) -> list[str]:
    return [rid for rid in scored_musts(level) if CATALOG[rid]["observable"]]


def run_of(results: list[Result], *, level: str = "contract", selected: bool = False) -> Run:
    run = Run(target=parse_target("stdio:x"),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read without a None check
              eras=ERAS, seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None, timeout=1.0)
    run.level, run.selected = level, selected
    run.results.extend(results)
    return run


def passing(level: str = "contract", *, leave_out: tuple[str, ...] = ()) -> list[Result]:
    """One passing check per observable scored MUST, run in no particular era (so: every era)."""
    return [Result(f"synthetic.{rid.lower()}", (rid,), None, Status.PASS, "n", 0.0)
            for rid in observable(level) if rid not in leave_out]


def result(rid: str, status: Status, era: str | None = None, message: str = "", **extra: Any) -> Result:
    return Result(f"synthetic.{rid.lower()}.{status.value.lower()}", (rid,), era, status, "n", 0.0, message, **extra)


def test_every_scored_must_exercised_and_passed_is_conformant() -> None:
    run = run_of(passing())
    assert exit_code(run) == EXIT_CONFORMANT
    assert summary_lines(run)[-1].startswith("VERDICT: conformant to contract 1.0.0 at the contract level")


def test_a_skipped_must_makes_the_run_incomplete_with_its_reason() -> None:
    reason = ("the profile has no other-tenant (tenant isolation needs a second scope with memory on and a principal) "
              "scope")
    run = run_of([*passing(leave_out=("EMC-HOST-005",)), result("EMC-HOST-005", Status.SKIP, "legacy", reason),
                  result("EMC-HOST-005", Status.SKIP, "modern", reason)])
    assert exit_code(run) == EXIT_INCOMPLETE
    verdict = requirement_verdicts(run)["EMC-HOST-005"]
    assert verdict["outcome"] == NOT_EXERCISED
    assert {g["era"] for g in verdict["not_exercised"]} == set(ERAS)
    assert all(g["reason"] == reason and "profile" in g["unlock"] for g in verdict["not_exercised"])
    text = "\n".join(summary_lines(run))
    assert "tenant isolation needs a second scope" in text and "EMC-HOST-005 (legacy, modern)" in text
    assert text.splitlines()[-1].startswith("VERDICT: incomplete")


@pytest.mark.parametrize("status", [Status.SKIP, Status.BLOCKED])
def test_a_skip_beside_a_pass_still_leaves_the_must_unexercised(status: Status) -> None:
    run = run_of([*passing(), result("EMC-IDEM-004", status, "legacy", "fewer than two principals granted capture")])
    assert requirement_verdicts(run)["EMC-IDEM-004"]["outcome"] == NOT_EXERCISED
    assert exit_code(run) == EXIT_INCOMPLETE


def test_a_must_passed_in_one_era_only_is_not_exercised_in_the_other() -> None:
    results = [*passing(leave_out=("EMC-GATE-003",)), result("EMC-GATE-003", Status.PASS, "modern")]
    verdict = requirement_verdicts(run_of(results))["EMC-GATE-003"]
    assert verdict["outcome"] == NOT_EXERCISED and [g["era"] for g in verdict["not_exercised"]] == ["legacy"]


def test_a_must_not_applicable_in_an_era_is_not_held_against_the_run() -> None:
    results = [*passing(leave_out=("EMC-GATE-003",)), result("EMC-GATE-003", Status.PASS, "modern"),
               result("EMC-GATE-003", Status.NA, "legacy", "request_state exists only in the 2026-07-28 era")]
    run = run_of(results)
    assert requirement_verdicts(run)["EMC-GATE-003"]["outcome"] == PASSED
    assert exit_code(run) == EXIT_CONFORMANT


def test_a_requirement_with_nothing_applicable_is_counted_apart() -> None:
    results = [*passing(leave_out=("EMC-HP-023",)),
               result("EMC-HP-023", Status.NA, None, "the target is not served over HTTP")]
    run = run_of(results)
    assert requirement_verdicts(run)["EMC-HP-023"]["outcome"] == NOT_APPLICABLE
    assert exit_code(run) == EXIT_CONFORMANT


def test_fail_wins_over_incomplete() -> None:
    run = run_of([result("EMC-ENV-002", Status.FAIL, "legacy", "an extra member")])
    assert exit_code(run) == EXIT_MUST_FAILED


def test_a_selected_run_is_partial_and_writes_no_certificate(tmp_path: Path) -> None:
    run = run_of(passing(), selected=True)
    assert exit_code(run) == EXIT_INCOMPLETE
    assert "partial run" in summary_lines(run)[-1]
    write_reports(run, tmp_path)
    assert not (tmp_path / "certificate.md").exists()
    assert (tmp_path / "report.md").read_text(encoding="utf-8").startswith("# Partial conformance report")
    assert badge(run)["message"] == "partial run"
    footer = json.loads((tmp_path / "report.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    assert footer["exit_code"] == EXIT_INCOMPLETE and footer["verdict"].startswith("VERDICT: incomplete")


def test_a_conformant_run_writes_a_certificate_naming_its_level(tmp_path: Path) -> None:
    stale = tmp_path / "certificate.md"
    run = run_of(passing("pins"), level="pins")
    write_reports(run, tmp_path)
    certificate = stale.read_text(encoding="utf-8")
    assert certificate.startswith("# Certificate of conformance — contract 1.0.0, pins level")
    assert "- Eras exercised: legacy, modern" in certificate and "transport: stdio" in certificate
    write_reports(run_of([]), tmp_path)  # a later run that is not conformant removes the old certificate
    assert not stale.exists()


@pytest.mark.parametrize("level", ["contract", "pins"])
@pytest.mark.parametrize("shape", ["all-pass", "one-fail", "nothing-run", "partial"])
def test_the_summary_counts_every_scored_must(level: str, shape: str) -> None:
    results = {"all-pass": passing(level), "one-fail": [*passing(level), result("EMC-ENV-003", Status.FAIL)],
               "nothing-run": [], "partial": passing(level)[::3]}[shape]
    verdicts = requirement_verdicts(run_of(results, level=level))
    scored = {rid: v for rid, v in verdicts.items() if v["scored"] and v["level"] in ("MUST", "MUST NOT")
              and v["status"] == "established"}
    counted = tally(scored)
    assert counted["passed"] + counted["failed"] + counted["not_exercised"] + counted["excluded"] == counted["total"]
    assert counted["total"] == len(scored_musts(level))
    assert counted["unobservable"] == sum(1 for rid in scored_musts(level) if not CATALOG[rid]["observable"])


def test_profile_pins_are_scored_only_at_the_profile_level() -> None:
    pin = next(rid for rid in observable("pins") if CATALOG[rid]["source"] == "pin")
    contract_run = run_of([*passing("pins", leave_out=(pin,)), result(pin, Status.FAIL, None, "our text differs")])
    assert exit_code(contract_run) == EXIT_CONFORMANT
    assert any(f"pins failed: {pin}" in line for line in summary_lines(contract_run))
    profile_run = run_of(contract_run.results, level="pins")
    assert exit_code(profile_run) == EXIT_MUST_FAILED


def test_a_pin_fails_its_profile_requirement_and_spares_the_contract_one() -> None:
    checked = Result("envelope.fixed-messages", ("EMC-ENV-006", "EMC-ENV-008"), None, Status.PASS, "n", 0.0,
                     pins={"EMC-ENV-008": ["the message of NOT_FOUND is not spec/errors.json's"]})
    verdicts = requirement_verdicts(run_of([*passing("pins", leave_out=("EMC-ENV-006", "EMC-ENV-008")), checked],
                                           level="pins"))
    assert verdicts["EMC-ENV-006"]["outcome"] == PASSED
    assert verdicts["EMC-ENV-008"]["outcome"] == "FAILED"


def test_pins_are_recorded_per_check() -> None:
    _checks.take_pins()
    assert _checks.pin("EMC-ENV-008", False, "differs") is False
    _checks.pin("EMC-ENV-007", True, "unused")
    assert _checks.take_pins() == {"EMC-ENV-008": ["differs"], "EMC-ENV-007": []}
    assert _checks.take_pins() == {}


def test_long_waits_need_deep() -> None:
    with pytest.raises(pytest.skip.Exception, match="--deep"):
        _checks.needs_deep(300, "waiting out a 300 s confirmation TTL")
    _checks.needs_deep(4, "a short TTL")  # short enough for the default run
    _checks.set_deep(True)
    try:
        _checks.needs_deep(300, "waiting out a 300 s confirmation TTL")
    finally:
        _checks.set_deep(False)


def test_not_applicable_is_a_skip() -> None:
    with pytest.raises(pytest.skip.Exception):
        _checks.not_applicable("the target is not served over HTTP")


def test_a_check_of_a_contract_requirement_also_covers_the_pins_split_from_it() -> None:
    split = {rid: r["split_from"] for rid, r in CATALOG.items() if "split_from" in r}
    assert split, "the catalog has split pins"
    child, parent = next(iter(split.items()))

    @check("synthetic.split-parent", parent)
    def probe() -> None: ...

    marker = next(m for m in probe.pytestmark if m.name == "engram_check")  # type: ignore[attr-defined]  # set by the check's marks
    assert marker.args[1][0] == parent and child in marker.args[1]
