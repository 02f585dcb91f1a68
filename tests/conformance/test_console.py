"""The console of `conformance`: check families and check ids, never pytest's own output.

Each test runs the real command line as a subprocess against the bundled
reference (or a faulty variant of it) with a short --select, and reads what a
person or a CI log would see.
"""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._console import Family, check_line, counts_text, in_ci
from engram_mcp.conformance._run import Result
from engram_mcp.reference._init import write_configuration

CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance._cli"]
FAULTY = Path(__file__).resolve().parents[1] / "faulty" / "targets.py"
RUN_TIMEOUT = 300
# What pytest prints and the console must not: progress dots, percentages, node ids, its count line, paths.
PYTEST_ARTEFACTS = [re.compile(p, re.M) for p in (
    r"^[.sFExX]+\s*(\[\s*\d+%\])?$", r"\[\s*\d+%\]", r"::test_", r"\.py::", r"site-packages",
    r"\b\d+ (passed|failed|skipped|deselected|errors?)\b[^\n]* in \d+\.\d+s\b", r"^=+ .* =+$", r"short test summary",
)]
FAMILY_LINE = re.compile(r"^(?P<family>[a-z-]+)\s+(?:(?P<era>legacy|modern)\s+)?(?P<done>\d+)/(?P<total>\d+)"
                         r"\s+(?P<counts>.+?)\s+\(\d+\.\d s\)$", re.M)
CHECK_LINE = re.compile(r"^(?P<status>[A-Z]+)\s+(?P<check>[a-z-]+\.[a-z0-9.-]+)@(?P<era>legacy|modern)"
                        r"(\[(?P<case>[^\]]+)\])?(?: — (?P<message>.+))?$", re.M)


def conformance(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CONFORMANCE, *args], capture_output=True, text=True, timeout=RUN_TIMEOUT, cwd="/",
                          env={**os.environ, **(env or {})})


def assert_no_pytest_artefacts(output: str) -> None:
    for pattern in PYTEST_ARTEFACTS:
        assert not pattern.search(output), f"pytest output leaked ({pattern.pattern}):\n{output[-3000:]}"
    assert "Traceback" not in output


@pytest.fixture(scope="module")
def configuration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("console") / "reference"
    write_configuration(directory, seed="console")
    return directory


# -- the lines themselves -------------------------------------------------------


def test_a_check_line_names_status_check_era_and_case() -> None:
    passed = Result("search.stale-cursor", ("EMC-SRCH-004",), "legacy", Status.PASS, "n", 0.1,
                    message="ignored for a pass", case="tampered")
    assert check_line(passed) == "PASS    search.stale-cursor@legacy[tampered]"
    failed = Result("envelope.audit-id", ("EMC-ENV-002",), "modern", Status.FAIL, "n", 0.1,
                    message="two calls shared an audit id\nsecond line")
    assert check_line(failed) == "FAIL    envelope.audit-id@modern — two calls shared an audit id"


def test_a_family_line_counts_each_status_it_saw() -> None:
    family = Family("gate", "modern", total=4, done=4, elapsed=1.25)
    family.counts.update([Status.PASS, Status.PASS, Status.FAIL, Status.SKIP])
    assert counts_text(family.counts) == "2 PASS, 1 FAIL, 1 SKIP"
    line = FAMILY_LINE.fullmatch(family.line())
    assert line and line.group("family", "era", "done", "total", "counts") == ("gate", "modern", "4", "4",
                                                                                "2 PASS, 1 FAIL, 1 SKIP")


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("1", True), ("", False), ("false", False),
                                                 ("0", False), (None, False)])
def test_ci_is_told_by_the_ci_variable(value: str | None, expected: bool) -> None:
    assert in_ci({} if value is None else {"CI": value}) is expected


# -- the command line -------------------------------------------------------------


def test_in_ci_one_plain_line_per_family_and_era_and_no_pytest_output(configuration: Path) -> None:
    result = conformance("--target", "reference", "--select", "discovery.opted", "--select", "search.stale-cursor",
                         env={"CI": "true"})
    assert result.returncode == 5, result.stdout[-3000:] + result.stderr[-2000:]
    assert_no_pytest_artefacts(result.stdout + result.stderr)
    assert "\x1b[" not in result.stdout  # no terminal control codes in a CI log
    lines = [(m["family"], m["era"]) for m in FAMILY_LINE.finditer(result.stdout)]
    assert sorted(lines) == [("discovery", "legacy"), ("discovery", "modern"), ("search", "legacy"),
                             ("search", "modern")]  # once each
    assert [m["era"] for m in FAMILY_LINE.finditer(result.stdout)] == ["legacy", "legacy", "modern", "modern"]
    search = next(m for m in FAMILY_LINE.finditer(result.stdout) if m["family"] == "search")
    assert search["done"] == search["total"] == "9" and search["counts"] == "9 PASS"  # the nine stale-cursor cases
    assert not CHECK_LINE.search(result.stdout)  # check lines only with -v
    assert result.stdout.rstrip().endswith("VERDICT: incomplete — partial run (--select): a partial report, "
                                           "never a certificate")


def test_verbose_lists_every_check_with_era_case_and_status(configuration: Path) -> None:
    result = conformance("--target", "reference", "--select", "search.stale-cursor", "--select", "discovery.granted",
                         "-v")
    assert result.returncode == 5, result.stdout[-3000:] + result.stderr[-2000:]
    assert_no_pytest_artefacts(result.stdout + result.stderr)
    lines = [m.groupdict() for m in CHECK_LINE.finditer(result.stdout)]
    stale = [line for line in lines if line["check"] == "search.stale-cursor"]
    assert len(stale) == 18 and {line["era"] for line in stale} == {"legacy", "modern"}
    # Repeated checks are told apart by their case, the same cases in each era.
    by_era = {era: [line["case"] for line in stale if line["era"] == era] for era in ("legacy", "modern")}
    assert len(set(by_era["legacy"])) == 9 and by_era["legacy"] == by_era["modern"]
    assert None not in by_era["legacy"] and "tampered" in by_era["legacy"]
    assert {line["status"] for line in lines} == {"PASS"}
    assert any(line["check"] == "discovery.granted-tools" for line in lines)


def test_a_failing_run_names_its_failing_checks_and_their_verdicts(configuration: Path, tmp_path: Path) -> None:
    target = "stdio:" + shlex.join([sys.executable, str(FAULTY), "idempotency-key-15-bytes",
                                    "--config", str(configuration / "server.toml")])
    result = conformance("--target", target, "--profile", str(configuration / "conformance-profile.toml"),
                         "--select", "idempotency.key-bounds", "--era", "legacy", env={"CI": "1"})
    assert result.returncode == 1, result.stdout[-3000:] + result.stderr[-2000:]
    assert_no_pytest_artefacts(result.stdout + result.stderr)
    listed = result.stdout.split("failing checks (", 1)[1].split("\n\n", 1)[0]
    block = "\n".join(line.strip() for line in listed.splitlines())
    failing = [m.groupdict() for m in CHECK_LINE.finditer(block)]
    assert failing and all(f["status"] == "FAIL" and f["check"] == "idempotency.key-bounds" for f in failing)
    assert all(f["message"] for f in failing)  # each with its one-line verdict
    assert re.search(r"^idempotency\s+legacy\s+\d+/\d+\s+.*\d+ FAIL", result.stdout, re.M)
    assert "VERDICT: not conformant (a MUST failed)" in result.stdout


def _through_a_terminal(args: list[str], timeout: float = RUN_TIMEOUT) -> tuple[int, str]:
    """Run the command with a pseudo-terminal as its stdout, as a person at a terminal would."""
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"COLUMNS": "120", "TERM": "xterm-256color"}
    leader, follower = pty.openpty()
    process = subprocess.Popen([*CONFORMANCE, *args], stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                               env=env, cwd="/")
    os.close(follower)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the process has ended
                break
            if not chunk:
                break
            chunks.append(chunk)
        elif process.poll() is not None:
            break
    os.close(leader)
    code = process.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", "replace")


def test_on_a_terminal_a_live_progress_bar_per_family(configuration: Path) -> None:
    code, output = _through_a_terminal(["--target", "reference", "--select", "discovery.opted",
                                        "--select", "search.stale-cursor", "--era", "modern"])
    assert code == 5, output[-3000:]
    # Without its control codes, each redraw of the display starts a line of its own.
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output).replace("\r\n", "\n").replace("\r", "\n")
    assert "━" in plain  # rich's bars
    assert re.search(r"^discovery\s.*━.*\s2/2\b.*2 PASS", plain, re.M)
    assert re.search(r"^search\s.*━.*\s9/9\b.*9 PASS", plain, re.M)
    assert_no_pytest_artefacts(plain)
    assert "VERDICT: incomplete — partial run (--select)" in plain


def test_an_internal_error_of_the_harness_is_shown_not_swallowed(tmp_path: Path) -> None:
    # A plugin that breaks during collection stands for a defect in the harness itself.
    (tmp_path / "breaks_the_harness.py").write_text(
        "def pytest_collection_finish(session):\n    raise RuntimeError('the harness broke here')\n", encoding="utf-8")
    script = ("import sys; from engram_mcp.conformance.plugin import run_suite; "
              "sys.exit(run_suite(['--target', 'stdio:unused', '-p', 'breaks_the_harness']).exit_code)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=RUN_TIMEOUT,
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(tmp_path), "CI": "1"})
    assert result.returncode == 3, result.stdout[-2000:] + result.stderr[-2000:]
    assert "conformance: internal error in the harness" in result.stderr
    assert "RuntimeError: the harness broke here" in result.stderr


def test_the_family_column_is_as_wide_as_the_longest_family_name() -> None:
    from types import SimpleNamespace

    from engram_mcp.conformance._console import Console

    def item(check: str, era: str) -> object:
        marker = SimpleNamespace(args=(check,))
        return SimpleNamespace(nodeid=f"{check}[{era}]", get_closest_marker=lambda name: marker,
                               callspec=SimpleNamespace(params={"era": era}))

    checks = ("confirmation-ref.single-use", "discovery.opted", "gate.refusal")
    items = [item(check, era) for check in checks for era in ("legacy", "modern")]
    console = Console(quiet=True, live=False, stream=open(os.devnull, "w"))  # noqa: SIM115 - closed below
    try:
        console.pytest_collection_finish(SimpleNamespace(items=items, config=SimpleNamespace(stash={})))  # type: ignore[arg-type]  # a stand-in session
        for part in console.parts.values():
            part.done = part.total = 1
            part.counts[Status.PASS] += 1
        lines = [part.line() for part in console.parts.values()]
    finally:
        console.close()
    assert all(FAMILY_LINE.fullmatch(line) for line in lines), lines
    # The era and the counts start in the same column on every line, confirmation-ref's too.
    assert len({line.index(" legacy ") if " legacy " in line else line.index(" modern ") for line in lines}) == 1
    assert len({line.index("1/1") for line in lines}) == 1
