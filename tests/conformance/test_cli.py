"""The two commands as a user runs them: real subprocesses, `python -m`, --version and --format json."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engram_mcp.conformance._run import harness_version
from engram_mcp.contract import CONTRACT_VERSION

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance"]
REFERENCE = [sys.executable, "-m", "engram_mcp.reference"]
SCRIPTS = Path(sys.executable).parent


def run(command: list[str], *, timeout: float = 120, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=cwd or "/")


@pytest.mark.parametrize(("command", "name"), [(CONFORMANCE, "conformance"), (REFERENCE, "engram-reference"),
                                                ([str(SCRIPTS / "conformance")], "conformance"),
                                                ([str(SCRIPTS / "engram-reference")], "engram-reference")])
def test_version_names_the_package_and_the_contract(command: list[str], name: str) -> None:
    if not Path(command[0]).exists():
        pytest.skip(f"{command[0]} is not installed here (the package is not installed as scripts)")
    ran = run([*command, "--version"])
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"{name} {harness_version()} (contract {CONTRACT_VERSION})"
    assert harness_version() != "0+unknown"


def test_python_m_runs_both_commands(tmp_path: Path) -> None:
    written = run([*REFERENCE, "init", str(tmp_path / "engram")])
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "engram" / "server.toml").is_file()
    listed = run([*CONFORMANCE, "list"])
    assert listed.returncode == 0 and "requirements," in listed.stdout.splitlines()[-1]
    explained = run([*CONFORMANCE, "explain", "EMC-NOPE-999"])
    assert explained.returncode == 2 and "no requirement or check" in explained.stderr
    helped = run([*CONFORMANCE, "--help"])
    assert helped.returncode == 0
    for shown in ("--sign-key", "--format", "--version", "verify-certificate", "keygen"):
        assert shown in helped.stdout
    assert run([*CONFORMANCE, "verify-certificate", "--help"]).returncode == 0


def test_usage_errors_exit_2() -> None:
    assert run([*CONFORMANCE]).returncode == 2  # --target is required
    assert run([*CONFORMANCE, "--target", "reference", "--format", "yaml"]).returncode == 2
    assert run([*CONFORMANCE, "explain"]).returncode == 2
    assert run([*REFERENCE]).returncode == 2


def _summary(ran: subprocess.CompletedProcess[str]) -> dict:
    """stdout holds one JSON object and nothing else; the console went to stderr."""
    lines = ran.stdout.strip().splitlines()
    assert len(lines) == 1, ran.stdout[-2000:]
    return json.loads(lines[0])


def test_format_json_prints_only_the_summary_on_stdout(tmp_path: Path) -> None:
    ran = run([*CONFORMANCE, "--target", "reference", "--select", "discovery", "--era", "modern", "--format", "json",
               "--report-dir", str(tmp_path)], timeout=300)
    summary = _summary(ran)
    assert summary["exit_code"] == ran.returncode == 5  # partial: incomplete
    assert summary["verdict"].startswith("VERDICT: incomplete") and summary["conformant"] is False
    assert summary["level"] == "contract" and summary["eras"] == ["modern"] and summary["selection"] == ["discovery"]
    assert summary["counts"].get("PASS", 0) > 0 and set(summary["counts"]) <= {"PASS", "SKIP", "WARN"}
    assert summary["scored_musts"]["not_exercised"] > 0
    assert summary["server"].startswith("engram-reference") and summary["report_dir"] == str(tmp_path)
    assert summary["attestation"] is None
    assert "VERDICT: incomplete" in ran.stderr  # the human summary is still there, on stderr
    footer = json.loads((tmp_path / "report.jsonl").read_text().splitlines()[-1])
    assert footer["exit_code"] == summary["exit_code"] and footer["verdict"] == summary["verdict"]


def test_format_json_says_an_unreachable_target_was_not_judged(tmp_path: Path) -> None:
    ran = run([*CONFORMANCE, "--target", f"stdio:{tmp_path / 'no-such-server'}", "--format", "json"], timeout=120)
    summary = _summary(ran)
    assert ran.returncode == summary["exit_code"] == 3
    assert summary["verdict"].startswith("VERDICT: not judged") and summary["unreachable"]
    assert "Traceback" not in ran.stderr


def test_an_earlier_runs_reports_do_not_outlive_a_run_that_was_not_judged(tmp_path: Path) -> None:
    from engram_mcp.conformance._certificate import ATTESTATION_FILE
    from engram_mcp.conformance._report import REPORT_FILES

    reports = tmp_path / "reports"
    reports.mkdir()
    for name in (*REPORT_FILES, ATTESTATION_FILE):
        (reports / name).write_text("an earlier run's\n")
    bad = tmp_path / "profile.toml"
    bad.write_text("[unknown\n")
    ran = run([*CONFORMANCE, "--target", "stdio:x", "--profile", str(bad), "--report-dir", str(reports)])
    assert ran.returncode == 2
    assert sorted(p.name for p in reports.iterdir()) == []


def test_format_json_on_a_usage_error_in_the_run_still_prints_json(tmp_path: Path) -> None:
    """A profile the plugin refuses stops pytest before any run exists: exit 2, and scripts still get JSON."""
    bad = tmp_path / "profile.toml"
    bad.write_text("[unknown\n")
    ran = run([*CONFORMANCE, "--target", "stdio:x", "--profile", str(bad), "--format", "json"])
    summary = _summary(ran)
    assert ran.returncode == summary["exit_code"] == 2
    assert summary["verdict"] is None and summary["error"]


def test_a_select_prefix_naming_nothing_is_a_usage_error_with_a_suggestion(tmp_path: Path) -> None:
    """A typo must not pass for a partial run (exit 5): exit 2 before the target is reached, and the closest ids."""
    ran = run([*CONFORMANCE, "--target", f"stdio:{tmp_path / 'never-started'}", "--select", "discovry",
               "--select", "EMC-HOST"])
    assert ran.returncode == 2, ran.stderr[-2000:]
    assert "'discovry' matches no check or requirement id (did you mean 'discovery'?)" in ran.stderr
    assert "EMC-HOST" not in ran.stderr and "VERDICT" not in ran.stdout + ran.stderr


def test_a_baseline_entry_naming_no_check_is_a_usage_error(tmp_path: Path) -> None:
    baseline = tmp_path / "baseline.txt"
    baseline.write_text("# known\ndiscovery.granted-tool@legacy\nsearch.limit@future\n", encoding="utf-8")
    ran = run([*CONFORMANCE, "--target", f"stdio:{tmp_path / 'never-started'}", "--expected-failures", str(baseline)])
    assert ran.returncode == 2, ran.stderr[-2000:]
    assert "names no check of the suite (did you mean 'discovery.granted-tools'?)" in ran.stderr
    assert "'search.limit@future' names no era" in ran.stderr


@pytest.mark.parametrize(("typed", "suggested"), [("discovery.unknwn-tool", "'discovery.unknown-tool'"),
                                                  ("EMC-HOST-06", "'EMC-HOST-006'")])
def test_explain_suggests_the_closest_id(typed: str, suggested: str) -> None:
    ran = run([*CONFORMANCE, "explain", typed])
    assert ran.returncode == 2 and "did you mean" in ran.stderr and suggested in ran.stderr, ran.stderr


def test_a_reader_that_stops_early_gets_no_traceback() -> None:
    """`conformance list | head -1`: the pipe closes after one line; the command ends as SIGPIPE would end it."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)  # smaller than the listing, so its writer must meet the close
    lister = subprocess.Popen([*CONFORMANCE, "list"], stdout=write_end, stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        assert reader.readline().startswith(b"requirement")
    assert lister.stderr is not None
    errors = lister.stderr.read().decode()
    assert lister.wait(timeout=60) == 141, errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors, errors


def test_explain_gives_our_statement_and_labels_the_contracts_own_words() -> None:
    explained = run([*CONFORMANCE, "explain", "EMC-IDEM-005"])
    assert explained.returncode == 0, explained.stderr
    lines = explained.stdout.splitlines()
    assert "duplicate_exact" in lines[1] and "«" not in lines[1], "the second line is the statement in English"
    source = next(line for line in lines if line.strip().startswith("source:"))
    assert "«" not in source, f"the source line quotes the contract unlabelled: {source}"
    quoted = [line for line in lines if "«" in line]
    assert quoted and all("Spanish original" in line for line in quoted), quoted


def test_an_unreachable_run_says_nothing_ran_instead_of_counting_gaps(tmp_path: Path) -> None:
    ran = run([*CONFORMANCE, "--target", f"stdio:{tmp_path / 'no-such-server'}"], timeout=120)
    assert ran.returncode == 3, ran.stdout + ran.stderr
    lines = (ran.stdout + ran.stderr).splitlines()
    assert "checks: none ran, the target was not reached" in lines
    assert any(line.startswith("scored MUSTs: none judged (") for line in lines), lines
    assert not any("not exercised" in line for line in lines), "an unreached target has no gaps, only no judgement"
    unreachable = next(line for line in lines if line.startswith("TARGET UNREACHABLE"))
    assert unreachable.endswith("[legacy and modern eras]"), unreachable


@pytest.mark.parametrize(("text", "limit"), [
    ("the profile names no other workspace where the scope could be tried", 30),
    ("one " * 80, 240), ("x" * 300, 240), ("short enough", 240),
])
def test_a_clipped_reason_never_cuts_a_word(text: str, limit: int) -> None:
    from engram_mcp.conformance._words import clipped

    shown = clipped(text, limit)
    assert len(shown) <= limit
    if shown == text:
        return
    assert shown.endswith("…")
    kept = shown.removesuffix("…").split()
    words = text.split()
    assert kept == words[:len(kept)] or len(words) == 1, f"a word was cut: {shown!r}"
