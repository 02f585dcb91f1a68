"""A server in the making is judged on what it serves: the reference behind a filter that serves only search and
get (tests/partial_server.py), run through the real command line.

With a profile that grants what it serves, every check of those tools runs and the tools table names the four it
does not serve; without a profile, what runs with none runs with the profile too; with a profile written for all
six, the preflight finds the four out and drops their grants; an unknown tool answered the way some SDKs answer it
fails, with the answer's own text in the verdict and in report.jsonl.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from engram_mcp.reference._init import write_configuration
from tests.catalog_runs import python_spelling, sentences_of

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[2]
CONFORMANCE = [sys.executable, "-m", "engram_mcp.conformance._cli"]
SERVED, MISSING = ("search", "get"), ("capture", "request_admission", "withdraw", "forget")
JUDGED = {"PASS", "FAIL", "WARN", "PIN"}

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A configuration of the reference, its full profile, and a profile that grants only search and get."""
    directory = tmp_path_factory.mktemp("partial") / "engram"
    write_configuration(directory, seed="partial")
    full = (directory / "conformance-profile.toml").read_text(encoding="utf-8")
    two = re.sub(r'= \["engram_memory_search", "engram_memory_get"[^\]]*\]',
                 '= ["engram_memory_search", "engram_memory_get"]', full)
    assert two != full
    (directory / "two-tools.toml").write_text(two, encoding="utf-8")
    return directory


def target(home: Path, *extra: str) -> str:
    command = [sys.executable, str(ROOT / "tests" / "partial_server.py"), "--config", str(home / "server.toml"),
               "--tools", ",".join(SERVED), *extra]
    return "stdio:" + shlex.join(command)


def conformance(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CONFORMANCE, *args], capture_output=True, text=True, timeout=280)


def checks(report: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in report.read_text(encoding="utf-8").splitlines()]
    return [line for line in lines if line["type"] == "check"]


@pytest.fixture(scope="module")
def two_tools(home: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One whole run of the partial server under the two-tool profile, as JSON on stdout, reports written."""
    reports = tmp_path_factory.mktemp("two-tools")
    done = conformance("--target", target(home), "--profile", str(home / "two-tools.toml"),
                       "--report-dir", str(reports), "--format", "json")
    return done, reports


def test_a_server_serving_two_tools_gets_every_verdict_they_allow(two_tools: tuple[Any, Path]) -> None:
    done, reports = two_tools
    summary = json.loads(done.stdout)
    assert done.returncode == 5 == summary["exit_code"], done.stderr[-3000:]
    assert summary["counts"].get("PASS", 0) >= 120, summary["counts"]
    assert not summary["counts"].get("FAIL") and not summary["counts"].get("ERROR"), summary["counts"]
    states = {row["tool"].removeprefix("engram_memory_"): row["state"] for row in summary["tools"]}
    assert states == {**dict.fromkeys(SERVED, "served"), **dict.fromkeys(MISSING, "not granted")}
    said = summary["tools_summary"]
    assert all(name in said for name in MISSING) and "never certified" in said, said
    # The console opens its summary with the same table; the reports carry it too.
    console = done.stderr
    assert "tools (what the preflight learnt" in console
    for name in MISSING:
        assert re.search(rf"^  {name}\s+not granted\s+0\s+0\s+\d+\s+\d+$", console, re.M), console[-3000:]
    assert "| `engram_memory_capture` | not granted |" in (reports / "report.md").read_text(encoding="utf-8")
    html = (reports / "report.html").read_text(encoding="utf-8")
    assert "<h2 id='tools'>Tools</h2>" in html and "data-tool='engram_memory_forget'" in html


def test_the_real_report_of_a_two_tool_server_opens_with_its_tools_table(browser: WebDriver,
                                                                        two_tools: tuple[Any, Path]) -> None:
    """The run above, its report.html opened in headless Chromium: the table is shown, row by row as the run
    found the tools (set ENGRAM_REPORT_SCREENSHOT=DIR to keep the screenshot)."""
    from selenium.webdriver.common.by import By

    _, reports = two_tools
    browser.get((reports / "report.html").as_uri())
    table = browser.find_element(By.CSS_SELECTOR, "table.tools")
    browser.execute_script("arguments[0].scrollIntoView()", browser.find_element(By.ID, "tools"))
    assert table.is_displayed()
    rows = table.find_elements(By.CSS_SELECTOR, "tr[data-tool]")
    seen = {row.get_attribute("data-tool"): row.find_element(By.CSS_SELECTOR, "td.st").text for row in rows}
    assert seen == {f"engram_memory_{name}": "served" if name in SERVED else "not granted"
                    for name in (*SERVED, *MISSING)}, seen
    said = browser.find_element(By.CSS_SELECTOR, "p.tools-summary").text
    assert all(name in said for name in MISSING), said
    keep = os.environ.get("ENGRAM_REPORT_SCREENSHOT")
    shot = Path(keep) if keep else reports
    shot.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(shot / "two-tool-server.png"))


def test_a_check_held_back_names_the_tool_it_needs_once(two_tools: tuple[Any, Path]) -> None:
    """Every check held back for a tool says which, and the summary says it once, not once per check."""
    done, reports = two_tools
    held = [c for c in checks(reports / "report.jsonl") if c.get("missing_tools")]
    assert held and all(c["status"] == "SKIP" for c in held)
    assert all(set(c["missing_tools"]) <= {f"engram_memory_{n}" for n in MISSING} for c in held)
    assert all("which the profile grants to no principal" in c["message"] for c in held)
    reasons = [line for line in done.stderr.splitlines() if line.startswith("  - ")]
    assert sum("need a tool the target does not serve" in line for line in reasons) == 1, reasons


def test_no_sentence_of_the_run_spells_a_value_the_python_way(two_tools: tuple[Any, Path]) -> None:
    done, reports = two_tools
    for where, texts in sentences_of(reports / "report.jsonl").items():
        for text in texts:
            assert python_spelling(text) is None, f"{where}: {python_spelling(text)}"
    assert python_spelling(done.stderr) is None, python_spelling(done.stderr)


def test_a_profile_never_hides_what_a_run_without_one_judges(home: Path, two_tools: tuple[Any, Path],
                                                              tmp_path: Path) -> None:
    _, reports = two_tools
    done = conformance("--target", target(home), "--report-dir", str(tmp_path))
    assert done.returncode == 5, done.stdout[-3000:]
    without = {c["label"] for c in checks(tmp_path / "report.jsonl") if c["status"] in JUDGED}
    assert {"binding.untrusted-call@legacy[missing]", "transport.jsonrpc-frames@modern"} <= without
    judged = {c["label"]: c["status"] for c in checks(reports / "report.jsonl")}
    hidden = sorted(label for label in without if judged.get(label) not in JUDGED)
    assert not hidden, f"judged without a profile, not with one: {hidden}"


def test_a_profile_for_six_tools_finds_the_four_not_served(home: Path, tmp_path: Path) -> None:
    done = conformance("--target", target(home), "--profile", str(home / "conformance-profile.toml"),
                       "--select", "discovery", "--era", "legacy", "--report-dir", str(tmp_path), "--format", "json")
    summary = json.loads(done.stdout)
    assert done.returncode == 5, done.stderr[-3000:]
    states = {row["tool"].removeprefix("engram_memory_"): row for row in summary["tools"]}
    assert {name for name, row in states.items() if row["state"] == "not served"} == set(MISSING)
    assert "answered as for an unknown tool" in summary["tools_summary"]
    assert "-32602" in states["capture"]["how"]
    statuses = {c["check"]: c["status"] for c in checks(tmp_path / "report.jsonl")}
    # Each principal discovers the tools the target serves: the grants of the four it lacks were dropped.
    assert statuses["discovery.granted-tools"] == "PASS", done.stderr[-3000:]


def test_an_unknown_tool_answered_as_a_tool_result_fails_with_the_answer_s_own_words(home: Path,
                                                                                     tmp_path: Path) -> None:
    done = conformance("--target", target(home, "--unknown-as-result"), "--profile", str(home / "two-tools.toml"),
                       "--select", "discovery.unknown-tool", "--era", "legacy", "--report-dir", str(tmp_path))
    assert done.returncode == 1, done.stdout[-3000:]
    text = "MCP error -32602: Tool engram_memory_undefined_probe not found"
    failed = [c for c in checks(tmp_path / "report.jsonl") if c["status"] == "FAIL" and c["case"] == "unknown"]
    assert failed, done.stdout[-3000:]
    verdict = failed[0]["message"] + failed[0].get("detail", "")
    assert text in verdict and "isError true" in verdict and "-32602" in verdict, verdict
    raw = json.dumps(failed[0]["evidence"]["answers"])
    assert text in raw and '"isError": true' in raw
