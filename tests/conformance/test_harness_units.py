"""The harness's own parts, without a target: connectables, profiles, statuses, verdicts and reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engram_mcp.conformance._catalog import suite_checks
from engram_mcp.conformance._checks import Status, check, is_should_only, worst
from engram_mcp.conformance._connect import parse_target
from engram_mcp.conformance._plugin import Result, Run
from engram_mcp.conformance._profile import ProfileError, load_profile
from engram_mcp.conformance._redact import redact
from engram_mcp.conformance._report import badge, write_reports
from engram_mcp.conformance._verdicts import exit_code, requirement_verdicts
from engram_mcp.contract import load
from engram_mcp.reference._init import write_configuration


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("init")
    write_configuration(directory, seed="units")
    return directory / "conformance-profile.toml"


def test_connectables_parse_like_a_shell_and_refuse_the_rest() -> None:
    target = parse_target("stdio:my-server --config 'a b.toml'")
    assert target.kind == "stdio" and target.command == ("my-server", "--config", "a b.toml")
    assert parse_target("https://example.invalid/mcp").kind == "http"
    for bad in ("stdio:", "ftp://x", "my-server"):
        with pytest.raises(ValueError, match=r"stdio|--target"):
            parse_target(bad)


def test_the_generated_profile_fills_every_role(profile_path: Path) -> None:
    profile = load_profile(profile_path)
    roles = [profile.scope_for(), profile.sibling_workspace(), profile.other_tenant(), profile.opted_out(),
             profile.gated_capture(), profile.adjudicating(), profile.rejecting_secrets()]
    assert all(role is not None for role in roles)
    assert profile.scope_for().limited_principal() is not None
    assert profile.http_headers["Authorization"].startswith("Bearer ")


def test_a_profile_without_an_audience_is_refused(tmp_path: Path) -> None:
    broken = tmp_path / "profile.toml"
    broken.write_text("[binding]\nkid = 'x'\n", encoding="utf-8")
    with pytest.raises(ProfileError):
        load_profile(broken)


def test_check_markers_refuse_unknown_requirements_and_malformed_ids() -> None:
    with pytest.raises(ValueError, match="names no requirement the catalog holds"):
        check("envelope.shape", "EMC-NOPE-001")
    with pytest.raises(ValueError, match="malformed check id"):
        check("Envelope_Shape", "EMC-ENV-002")


def test_should_only_checks_warn_and_worst_status_wins() -> None:
    assert is_should_only(("EMC-GET-005",))
    assert not is_should_only(("EMC-GET-005", "EMC-GET-003"))
    assert worst([Status.PASS, Status.WARN, Status.SKIP]) is Status.WARN
    assert worst([Status.BLOCKED, Status.FAIL, Status.ERROR]) is Status.FAIL
    assert worst([]) is Status.SKIP


def test_every_suite_check_is_in_the_catalog_and_back() -> None:
    catalogued = {c for r in load().requirements["requirements"] for c in r["checks"]}
    assert catalogued == set(suite_checks())
    for check_id, requirements in suite_checks().items():
        for requirement in requirements:
            entry = next(r for r in load().requirements["requirements"] if r["id"] == requirement)
            assert check_id in entry["checks"]


def test_spec_checks_json_is_the_suite_written_down() -> None:
    """spec/checks.json, which the command line reads without importing the suite, is what the suite declares."""
    written = load().document("spec", "checks.json")
    load().validator(load().data_schema("checks")).validate(written)
    assert written["checks"] == suite_checks().as_data()["checks"], "run python tools/sync_checks.py"


def test_every_check_declares_what_it_needs() -> None:
    """Each check names the tools it calls (or that it judges whatever the target serves); a check whose cases
    name a tool says so with CASE_TOOL, and every role it names is one of the table's."""
    from engram_mcp.conformance._needs import ROLES

    catalog = suite_checks()
    for check_id in catalog:
        needs = catalog.needs(check_id)
        assert set(needs.roles) <= set(ROLES), check_id
        assert needs.eras, check_id
    # The checks that call no Engram tool at all are few, and each is about the wire or the listing itself.
    toolless = sorted(c for c in catalog if not catalog.tools(c) and not catalog.needs(c).judges_served)
    assert all(c.split(".")[0] in ("transport", "wiring", "discovery", "binding", "model") for c in toolless), toolless


def _run(results: list[Result], **overrides: object) -> Run:
    fields: dict[str, Any] = dict(
        target=parse_target("stdio:x"),
        profile=None,
        host=None,
        confirmer=None,
        eras=("legacy",),
        seed=0,
        examples=1,
        strict=False,
        baseline=frozenset(),
        report_dir=None,
        timeout=1.0,
    )
    fields.update(overrides)
    run = Run(**fields)
    run.results.extend(results)
    return run


def _result(status: Status, *requirements: str, check_id: str = "envelope.shape") -> Result:
    return Result(check_id, tuple(requirements), "legacy", status, "node", 0.1, "", {})


@pytest.mark.parametrize(
    ("results", "unreachable", "expected"),
    [
        ([_result(Status.PASS, "EMC-ENV-002")], None, 5),  # incomplete: the other scored MUSTs were not run
        ([_result(Status.FAIL, "EMC-ENV-002")], None, 1),
        ([_result(Status.WARN, "EMC-GET-005")], None, 5),
        ([_result(Status.XPASS, "EMC-ENV-002")], None, 4),
        ([_result(Status.ERROR, "EMC-ENV-002")], None, 3),
        ([_result(Status.FAIL, "EMC-CAP-004")], None, 5),  # unverified: reported, not scored (and nothing else ran)
        ([], "the target cannot be started", 3),
    ],
    ids=["pass", "must-fail", "should-warn", "stale-baseline", "harness-error", "unverified-not-scored", "unreachable"],
)
def test_exit_codes(results: list[Result], unreachable: str | None, expected: int) -> None:
    run = _run(results)
    run.unreachable = unreachable
    assert exit_code(run) == expected


def test_strict_scores_unverified_requirements() -> None:
    assert exit_code(_run([_result(Status.FAIL, "EMC-CAP-004")], strict=True)) == 1


def test_requirement_verdicts_take_the_worst_check() -> None:
    run = _run([_result(Status.PASS, "EMC-ENV-002"), _result(Status.FAIL, "EMC-ENV-002", check_id="envelope.other")])
    verdicts = requirement_verdicts(run)
    assert verdicts["EMC-ENV-002"]["verdict"] == "FAIL"
    assert verdicts["EMC-HOST-004"]["verdict"] == "EXCLUDED"
    assert verdicts["EMC-ENV-003"]["verdict"] == "NOT_RUN"


def test_evidence_is_redacted() -> None:
    token = "eyJhbGciOiJFZERTQSJ9.eyJhdWQiOiJ4In0.c2lnbmF0dXJl"
    evidence = {"binding": "eyJ...", "_meta": {"x": 1}, "text": "a" * 5000, "requestState": "s", "code": "NOT_FOUND",
                "echo": f"refused the binding {token} as expired",
                "pem": "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI\n-----END PRIVATE KEY-----"}
    out = redact(evidence)
    assert out["binding"] == out["_meta"] == out["requestState"] == "[redacted]"
    assert len(out["text"]) < 1100 and out["code"] == "NOT_FOUND"
    assert token not in out["echo"] and out["echo"] == "refused the binding [redacted] as expired"
    assert "MC4CAQ" not in out["pem"]


def test_reports_are_written_and_consistent(tmp_path: Path) -> None:
    run = _run([_result(Status.PASS, "EMC-ENV-002"), _result(Status.FAIL, "EMC-ENV-003", check_id="envelope.failure")])
    write_reports(run, tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["contract_digest"] == load().digest
    assert [line["type"] for line in lines[1:-1]] == ["check", "check"]
    assert lines[-1]["exit_code"] == 1 and lines[-1]["requirements"]["EMC-ENV-003"]["verdict"] == "FAIL"
    assert "not conformant" in (tmp_path / "report.md").read_text(encoding="utf-8")
    assert not (tmp_path / "certificate.md").exists()
    assert "EMC-ENV-003" in (tmp_path / "report.html").read_text(encoding="utf-8")
    assert json.loads((tmp_path / "badge.json").read_text(encoding="utf-8")) == badge(run)
    assert badge(run)["color"] == "red"


def test_reports_never_hold_a_binding(tmp_path: Path) -> None:
    token = "eyJhbGciOiJFZERTQSJ9.secret-claims.signature"
    result = _result(Status.PASS, "EMC-ENV-002")
    result.evidence.update({"meta": {"sentropic.engram.memory/host-binding": token}, "binding": token})
    write_reports(_run([result]), tmp_path)
    for name in ("report.jsonl", "report.md", "report.html"):
        assert token not in (tmp_path / name).read_text(encoding="utf-8")

