"""junit.xml: valid against the Jenkins xUnit and Ant JUnit schemas, named by check ids, never an empty green file.

The two schemas are vendored under tests/data/junit/ (origin and license in its
README) and read with ``xmlschema``.
"""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import xmlschema

from engram_mcp.conformance._checks import SOURCES_SCORED, Status
from engram_mcp.conformance._connect import parse_target
from engram_mcp.conformance._findings import BROKEN_RULES, area
from engram_mcp.conformance._junit import junit_report
from engram_mcp.conformance._report import write_reports
from engram_mcp.conformance._run import Result, Run
from engram_mcp.conformance._verdicts import exit_code
from engram_mcp.contract import load

SCHEMAS = Path(__file__).resolve().parent.parent / "data" / "junit"
CROSS_REFERENCES = ("EMC-CAP-002", "EMC-CAP-007", "EMC-CAP-008", "EMC-CAP-010", "EMC-CAP-011")


@pytest.fixture(scope="module", params=["junit-10.xsd", "JUnit.xsd"])
def schema(request: pytest.FixtureRequest) -> xmlschema.XMLSchema:
    return xmlschema.XMLSchema(str(SCHEMAS / request.param))


def bare_run(results: list[Result]) -> Run:
    run = Run(target=parse_target("stdio:my-server"),
              profile=None, host=None, confirmer=None,  # type: ignore[arg-type]  # never read without a None check
              eras=("legacy", "modern"), seed=0, examples=1, strict=False, baseline=frozenset(), report_dir=None,
              timeout=1.0)
    run.results.extend(results)
    return run


def all_passing() -> list[Result]:
    """One passing check per observable scored MUST of the contract level, in every era."""
    return [Result(f"synthetic.{entry['id'].lower()}", (entry["id"],), None, Status.PASS, "n", 0.01)
            for entry in load().requirements["requirements"]
            if entry["level"] in ("MUST", "MUST NOT") and entry["status"] == "established" and entry["observable"]
            and entry["source"] in SOURCES_SCORED["contract"]]


def failing() -> list[Result]:
    return [
        Result("arguments.cross-references", CROSS_REFERENCES, "legacy", Status.FAIL, "n", 0.5,
               "2 of 40 cross-references cases were answered wrongly\n- first case ...",
               {BROKEN_RULES: ["unique_citation_ids"]}, case="capture"),
        Result("search.stale-cursor", ("EMC-SRCH-010",), "modern", Status.PASS, "n", 0.1, case="limit-1"),
        Result("search.stale-cursor", ("EMC-SRCH-010",), "modern", Status.PASS, "n", 0.1, case="limit-2"),
        Result("search.limit", ("EMC-SRCH-003",), "legacy", Status.SKIP, "n", 0.0, "the profile grants no search"),
        Result("envelope.fixed-messages", ("EMC-ENV-006",), None, Status.ERROR, "n", 0.0,
               "OSError in the harness: gone"),
    ]


def document(run: Run) -> tuple[bytes, ET.Element]:
    data = junit_report(run, exit_code(run))
    return data, ET.fromstring(data)


def cases(root: ET.Element) -> dict[str, ET.Element]:
    return {case.get("name", ""): case for case in root.iter("testcase")}


def verdict_case(root: ET.Element) -> ET.Element:
    return cases(root)["run.verdict"]


def test_a_failing_run_is_valid_and_named_by_its_checks(schema: xmlschema.XMLSchema) -> None:
    run = bare_run(failing())
    data, root = document(run)
    schema.validate(data.decode("utf-8"))
    named = cases(root)
    # name = check id + era + case id, so repeated checks are told apart; classname = the contract area.
    assert {"arguments.cross-references@legacy[capture]", "search.stale-cursor@modern[limit-1]",
            "search.stale-cursor@modern[limit-2]", "search.limit@legacy", "envelope.fixed-messages"} <= set(named)
    failed = named["arguments.cross-references@legacy[capture]"]
    assert failed.get("classname") == area(run.results[0]) == "§2 capture / arguments"
    failure = failed.find("failure")
    assert failure is not None and failure.get("message") == "2 of 40 cross-references cases were answered wrongly"
    body = failure.text or ""
    assert "breaks EMC-CAP-007" in body and "breaks EMC-CAP-002" not in body
    assert "reproduce: conformance --target stdio:my-server --select arguments.cross-references --era legacy" in body
    assert named["search.limit@legacy"].find("skipped") is not None
    assert named["envelope.fixed-messages"].find("error") is not None
    # One suite per era, one for the checks run once for every era, and the run's own.
    assert [s.get("name") for s in root.iter("testsuite")] == ["run", "legacy era", "modern era", "every era"]
    assert verdict_case(root).find("failure").get("message") == "VERDICT: not conformant (a MUST failed)"


def test_an_unreachable_run_is_a_failing_testcase_not_an_empty_file(schema: xmlschema.XMLSchema) -> None:
    run = bare_run([])
    run.unreachable = "the target exited before answering initialize (exit code 127)"
    data, root = document(run)
    schema.validate(data.decode("utf-8"))
    assert sum(int(s.get("tests", "0")) for s in root.iter("testsuite")) >= 1
    failure = verdict_case(root).find("failure")
    assert failure is not None and failure.get("message", "").startswith("VERDICT: not judged")
    assert "exit code 127" in (failure.text or "")


def test_an_incomplete_run_fails_even_when_no_check_failed(schema: xmlschema.XMLSchema) -> None:
    results = all_passing()
    results = [r for r in results if r.requirements != ("EMC-HOST-001",)]
    results.append(Result("synthetic.skipped", ("EMC-HOST-001",), "legacy", Status.SKIP, "n", 0.0, "needs a profile"))
    data, root = document(bare_run(results))
    schema.validate(data.decode("utf-8"))
    assert not [c for c in root.iter("testcase") if c.find("failure") is not None and c.get("name") != "run.verdict"]
    assert verdict_case(root).find("failure").get("message", "").startswith("VERDICT: incomplete")


def test_a_conformant_run_passes_its_verdict(schema: xmlschema.XMLSchema) -> None:
    data, root = document(bare_run(all_passing()))
    schema.validate(data.decode("utf-8"))
    assert verdict_case(root).find("failure") is None
    assert not any(c.find("failure") is not None for c in root.iter("testcase"))


def test_a_run_green_only_by_its_baseline_fails_its_verdict(schema: xmlschema.XMLSchema) -> None:
    expected = Result("search.limit", ("EMC-SRCH-003",), "legacy", Status.XFAIL, "n", 0.0, "known failure")
    run = bare_run([*all_passing(), expected])
    assert exit_code(run) == 0  # the baseline keeps the job green ...
    data, root = document(run)
    schema.validate(data.decode("utf-8"))
    failure = verdict_case(root).find("failure")  # ... but the run is not conformant, and run.verdict says so
    assert failure is not None and failure.get("type") == "exit 0 with expected failures"
    assert "not conformant" in failure.get("message", "")


def test_text_xml_cannot_carry_is_escaped(schema: xmlschema.XMLSchema) -> None:
    odd = "control \x01 char, lone \ud800 surrogate, form feed \x0c"
    run = bare_run([Result("arguments.nfc", ("EMC-ENC-002",), "legacy", Status.FAIL, "n", 0.1, odd,
                           {"value": odd}, case="search")])
    data, root = document(run)
    schema.validate(data.decode("utf-8"))
    message = cases(root)["arguments.nfc@legacy[search]"].find("failure").get("message")
    assert message == "control \\u0001 char, lone \\ud800 surrogate, form feed \\u000c"


def test_the_command_line_writes_it_for_a_real_run(tmp_path: Path) -> None:
    """A short run of the bundled reference: the file pytest used to write is now ours, and valid."""
    command = [sys.executable, "-m", "engram_mcp.conformance._cli", "--target", "reference",
               "--select", "discovery.granted-tools", "--era", "legacy", "--report-dir", str(tmp_path)]
    completed = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert completed.returncode == 5, completed.stdout[-2000:] + completed.stderr[-2000:]  # a --select run: partial
    data = (tmp_path / "junit.xml").read_bytes()
    for name in ("junit-10.xsd", "JUnit.xsd"):
        xmlschema.XMLSchema(str(SCHEMAS / name)).validate(data.decode("utf-8"))
    named = cases(ET.fromstring(data))
    assert named["discovery.granted-tools@legacy"].find("failure") is None
    assert named["run.verdict"].find("failure").get("message", "").startswith("VERDICT: incomplete")


def test_write_reports_writes_junit_beside_the_others(tmp_path: Path) -> None:
    write_reports(bare_run(failing()), tmp_path)
    assert ET.parse(tmp_path / "junit.xml").getroot().tag == "testsuites"
