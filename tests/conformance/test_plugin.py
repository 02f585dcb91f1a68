"""The pytest plugin: its entry point, every way of loading it, the run model it fills, statuses and baseline."""

from __future__ import annotations

import ast
import hashlib
import os
import subprocess
import sys
import tomllib
from datetime import UTC
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from engram_mcp.conformance._checks import Blocked, NotApplicable, Status
from engram_mcp.conformance._connect import parse_target
from engram_mcp.conformance._plugin import _status, case_id
from engram_mcp.conformance._run import Run, ServerInfo
from engram_mcp.conformance._status import apply_baseline, expected_to_fail, read_baseline
from engram_mcp.conformance.plugin import run_suite
from engram_mcp.reference._init import write_configuration

ROOT = Path(__file__).resolve().parents[2]
PUBLIC = "engram_mcp.conformance.plugin"
SERVE = [sys.executable, "-m", "engram_mcp.reference", "serve"]


@pytest.fixture(scope="module")
def configuration(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("plugin") / "reference"
    write_configuration(directory, seed="plugin")
    return directory


def _target(configuration: Path) -> str:
    return "stdio:" + " ".join([*SERVE, "--config", str(configuration / "server.toml")])


# -- the entry point and loading -----------------------------------------------------


def test_the_pytest11_entry_point_is_the_public_module_under_its_own_name() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["entry-points"]
    assert declared["pytest11"] == {PUBLIC: PUBLIC}
    installed = [e for e in metadata.entry_points(group="pytest11") if e.value == PUBLIC]
    assert [e.name for e in installed] == [PUBLIC], "reinstall the package: its metadata predates the entry point"


def test_without_a_target_the_autoloaded_plugin_is_idle_and_light(tmp_path: Path) -> None:
    (tmp_path / "test_unrelated.py").write_text(
        "import sys\n\n"
        "def test_nothing_heavy_was_loaded():\n"
        f"    assert {PUBLIC!r} in sys.modules\n"
        "    assert 'engram_mcp.conformance._plugin' not in sys.modules\n"
        "    assert 'mcp' not in sys.modules\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    helped = subprocess.run([sys.executable, "-m", "pytest", "--help"], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path, env=env)
    assert "--target=TARGET" in helped.stdout and "Engram memory over MCP conformance" in helped.stdout


@pytest.mark.parametrize(("loading", "autoload"), [
    ([], True),  # the entry point alone
    (["-p", PUBLIC], True),  # named, and loaded already by its entry point
    (["-p", "engram_mcp.conformance._plugin"], True),  # the name older instructions gave
    (["-p", PUBLIC], False),  # named where autoloading is off
], ids=["entry-point", "public-name", "private-name", "no-autoload"])
def test_every_way_of_loading_the_plugin_runs_the_suite_once(configuration: Path, tmp_path: Path,
                                                            loading: list[str], autoload: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}
    if not autoload:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    ran = subprocess.run(
        [sys.executable, "-m", "pytest", *loading, "--pyargs", "engram_mcp.conformance.suite", "-c", os.devnull,
         "--import-mode=importlib", "-p", "no:cacheprovider", "-q", "--target", _target(configuration),
         "--profile", str(configuration / "conformance-profile.toml"), "--select", "discovery.opted",
         "--era", "legacy"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert ran.returncode == 5, ran.stdout[-3000:] + ran.stderr[-2000:]  # a --select run: at best incomplete
    assert "VERDICT: incomplete — partial run (--select)" in ran.stdout
    assert "2 passed" in ran.stdout  # the two cases of the one check, each run once


# -- the run model ------------------------------------------------------------------


# Modules that are pytest plugins themselves may reach the hooks; everything else reads the run model (_run).
PLUGIN_LAYER = {"_plugin.py", "plugin.py", "_console.py"}


def test_reports_and_checks_read_the_run_model_not_the_plugin_hooks() -> None:
    package = ROOT / "conformance"
    offenders = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package).as_posix()
        if name in PLUGIN_LAYER:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("conformance._plugin"):
                offenders.append(name)
    assert offenders == []


def test_the_verdict_is_a_value_not_a_module_global() -> None:
    from engram_mcp.conformance import _plugin

    assert not hasattr(_plugin, "FINAL_EXIT")


def test_run_suite_returns_the_verdict_and_a_run_that_names_itself(configuration: Path) -> None:
    profile = configuration / "conformance-profile.toml"
    outcome = run_suite(["--target", _target(configuration), "--profile", str(profile),
                         "--select", "search.stale-cursor", "--select", "discovery.opted"], quiet=True)
    run = outcome.run
    assert run is not None and outcome.exit_code == run.exit_code == 5
    assert run.started_at.tzinfo is UTC and run.finished_at is not None and run.started_at <= run.finished_at
    assert set(run.server_info) == {"legacy", "modern"}
    assert len(set(run.server_info.values())) == 1 and run.server_info["legacy"].name == "engram-reference"
    assert run.server_identity == str(run.server_info["modern"])
    assert run.select == ("search.stale-cursor", "discovery.opted") and run.selected
    assert run.profile_digest == "sha256:" + hashlib.sha256(profile.read_bytes()).hexdigest()
    assert run.harness_version == metadata.version("engram-memory-mcp")
    assert run.transports == ("stdio",)
    # Every result is told apart by its label; the nine stale-cursor cases are the same in each era.
    assert len({r.label for r in run.results}) == len(run.results) == 2 * (9 + 2)
    cases = {era: sorted(str(r.case) for r in run.results if r.check_id == "search.stale-cursor" and r.era == era)
             for era in ("legacy", "modern")}
    assert len(set(cases["legacy"])) == 9 and cases["legacy"] == cases["modern"]


def test_checks_dropped_by_pytests_own_filters_make_the_run_partial(configuration: Path) -> None:
    profile = configuration / "conformance-profile.toml"
    outcome = run_suite(["--target", _target(configuration), "--profile", str(profile), "--era", "modern",
                         "-k", "test_an_unavailable_tool_is_the_unknown_tool_error and unknown"], quiet=True)
    run = outcome.run
    assert run is not None and run.results and run.select == ()
    assert run.selected  # reported as partial: never a full run, never a certificate
    assert outcome.exit_code != 0


def test_an_unreachable_target_is_judged_not_a_pytest_error(tmp_path: Path) -> None:
    outcome = run_suite(["--target", "stdio:/nonexistent/engram-server", "--era", "legacy"], quiet=True)
    assert outcome.exit_code == 3 and outcome.run is not None and outcome.run.unreachable
    assert not outcome.run.selected  # the plugin's own deselection of every check is not a selection
    assert outcome.run.results == [] and outcome.run.server_info == {}


def test_a_usage_error_is_exit_2_without_a_run() -> None:
    assert run_suite(["--target", "ftp://nowhere"], quiet=True).exit_code == 2


def test_the_transport_is_named_as_mcp_names_it() -> None:
    def run_for(text: str) -> Run:
        return Run(target=parse_target(text),
                   profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read without a None check
                   eras=("legacy",), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None,
                   timeout=1.0)

    assert run_for("http://127.0.0.1:1/mcp").transports == ("streamable-http",)
    assert run_for("stdio:server").transports == ("stdio",)
    assert run_for("stdio:server").profile_digest is None  # no profile, no digest


@pytest.mark.parametrize(("era", "handshake", "expected"), [
    ("legacy", {"serverInfo": {"name": "s", "version": "2.1", "title": "S"}}, ServerInfo("s", "2.1", "S")),
    ("modern", {"_meta": {"io.modelcontextprotocol/serverInfo": {"name": "s", "version": "3"}}}, ServerInfo("s", "3")),
    ("modern", {"capabilities": {}}, None),
    ("legacy", {"serverInfo": {"version": "1"}}, None),
])
def test_the_server_identity_is_read_where_each_era_carries_it(era: str, handshake: dict[str, Any],
                                                              expected: ServerInfo | None) -> None:
    assert ServerInfo.from_handshake(era, handshake) == expected


@pytest.mark.parametrize(("ids", "era", "expected"), [
    (["legacy"], "legacy", None),
    (["modern", "too-short"], "modern", "too-short"),
    (["engram_memory_search", "limit-3", "legacy"], "legacy", "engram_memory_search-limit-3"),
])
def test_a_case_id_is_the_parametrised_case_without_its_era(ids: list[str], era: str, expected: str | None) -> None:
    item: Any = SimpleNamespace(callspec=SimpleNamespace(_idlist=ids))
    assert case_id(item, era) == expected
    assert case_id(SimpleNamespace(), None) is None  # type: ignore[arg-type]  # an item without a callspec


# -- statuses and the baseline -------------------------------------------------------


def test_the_baseline_names_a_check_an_era_or_one_case(tmp_path: Path) -> None:
    path = tmp_path / "baseline.txt"
    path.write_text("# known\nsearch.stale-cursor@legacy[tampered]  # one case\n\ngate.refusal\n"
                    "envelope.audit-id@modern\n", encoding="utf-8")
    baseline = read_baseline(path)
    assert baseline == {"search.stale-cursor@legacy[tampered]", "gate.refusal", "envelope.audit-id@modern"}
    assert expected_to_fail(baseline, "search.stale-cursor", "legacy", "tampered")
    assert not expected_to_fail(baseline, "search.stale-cursor", "legacy", "forged")
    assert not expected_to_fail(baseline, "search.stale-cursor", "modern", "tampered")
    assert expected_to_fail(baseline, "gate.refusal", "modern", "withdraw")
    assert expected_to_fail(baseline, "envelope.audit-id", "modern") and not expected_to_fail(baseline,
                                                                                               "envelope.audit-id",
                                                                                               "legacy")
    assert read_baseline(None) == frozenset()


def test_the_baseline_turns_failures_into_xfail_and_a_pass_into_xpass() -> None:
    assert apply_baseline(Status.FAIL, "m", True) == (Status.XFAIL, "m")
    assert apply_baseline(Status.WARN, "m", True) == (Status.XFAIL, "m")
    assert apply_baseline(Status.PASS, "", True)[0] is Status.XPASS
    assert apply_baseline(Status.FAIL, "m", False) == (Status.FAIL, "m")


def _raising(error: BaseException) -> pytest.CallInfo[None]:
    def call() -> None:
        raise error

    return pytest.CallInfo.from_call(call, "call")


def test_each_outcome_has_its_status() -> None:
    run: Any = SimpleNamespace(baseline=frozenset({"envelope.shape@legacy"}))

    def judged(error: BaseException, check_id: str = "envelope.other") -> tuple[Status, str]:
        return _status(_raising(error), run, check_id, "legacy", ("EMC-ENV-002",))

    assert judged(Blocked("no scope")) == (Status.BLOCKED, "no scope")
    assert judged(NotApplicable("http only")) == (Status.NA, "http only")
    assert judged(AssertionError("first line\nsecond")) == (Status.FAIL, "first line")
    assert judged(AssertionError("known"), "envelope.shape") == (Status.XFAIL, "known")
    assert judged(Blocked("known"), "envelope.shape") == (Status.BLOCKED, "known")  # not a conclusion


# -- a failure's detail --------------------------------------------------------------


def test_a_failures_detail_is_every_line_after_its_verdict_and_bounded() -> None:
    from engram_mcp.conformance._status import DETAIL_LINES, failure_detail

    problems = [f"- call {n}: isError is false with ok false" for n in range(3)]
    error = AssertionError("\n".join(["3 results disagree on isError; first: call 0", *problems]))
    run: Any = SimpleNamespace(baseline=frozenset())
    assert _status(_raising(error), run, "envelope.is-error", "legacy",
                   ("EMC-ENV-005",)) == (Status.FAIL, "3 results disagree on isError; first: call 0")
    assert failure_detail(error) == "\n".join(problems)
    # pytest's explanation of a plain assert is not the check's own detail.
    assert failure_detail(AssertionError("a page too long\nassert 3 <= 2\n +  where 3 = len([1, 2, 3])")) == ""
    assert failure_detail(AssertionError("one line")) == failure_detail(Blocked("no scope")) == ""
    many = failure_detail(AssertionError("\n".join(["verdict", *(f"- {n}" for n in range(DETAIL_LINES + 7))])))
    assert many.splitlines()[-1] == "… 7 more" and len(many.splitlines()) == DETAIL_LINES + 1
    long = failure_detail(AssertionError("verdict\n" + "x" * 100_000))
    assert len(long) < 1_000 and long.endswith("…")


def test_a_failing_checks_offending_results_reach_every_report(configuration: Path, tmp_path: Path) -> None:
    import json
    import shlex
    import xml.etree.ElementTree as ET

    from engram_mcp.conformance._report import write_reports

    faulty = ROOT / "tests" / "faulty" / "targets.py"
    target = "stdio:" + shlex.join([sys.executable, str(faulty), "is-error-never-set",
                                    "--config", str(configuration / "server.toml")])
    outcome = run_suite(["--target", target, "--profile", str(configuration / "conformance-profile.toml"),
                         "--select", "envelope.is-error", "--era", "legacy"], quiet=True)
    assert outcome.run is not None and outcome.exit_code == 1
    failed = next(r for r in outcome.run.results if r.check_id == "envelope.is-error")
    assert failed.status is Status.FAIL and "\n" not in failed.message
    offending = [line for line in failed.detail.splitlines() if line.startswith("- ")]
    assert len(offending) >= 2  # every offending result the check named, not only the first
    write_reports(outcome.run, tmp_path)
    lines = [json.loads(line) for line in (tmp_path / "report.jsonl").read_text(encoding="utf-8").splitlines()]
    line = next(x for x in lines if x.get("check") == "envelope.is-error")
    assert line["message"] == failed.message and line["detail"] == failed.detail
    body = ET.parse(tmp_path / "junit.xml").find(".//testcase[@name='envelope.is-error@legacy']/failure")
    assert body is not None and body.get("message") == failed.message
    assert all(problem in (body.text or "") for problem in offending)
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    shown = page.split("<pre class='detail'>", 1)[1].split("</pre>", 1)[0]
    from html import unescape

    assert all(problem in unescape(shown) for problem in offending)


def test_the_suite_collected_without_a_target_is_one_usage_error(tmp_path: Path) -> None:
    ran = subprocess.run([sys.executable, "-m", "pytest", "--pyargs", "engram_mcp.conformance.suite", "-q",
                          "-p", PUBLIC, "-p", "no:cacheprovider"], capture_output=True, text=True, timeout=120,
                         cwd=tmp_path)
    output = ran.stdout + ran.stderr
    assert ran.returncode == pytest.ExitCode.USAGE_ERROR, output[-2000:]
    assert output.count("give --target") == 1, output[-2000:]
    assert "fixture 'world' not found" not in output


def test_the_plugin_leaves_another_projects_tests_alone(tmp_path: Path) -> None:
    (tmp_path / "test_other.py").write_text("def test_other():\n    assert 1 + 1 == 2\n", encoding="utf-8")
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", PUBLIC, "-p", "no:cacheprovider",
                          "test_other.py"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
