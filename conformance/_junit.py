"""junit.xml as CI systems show it: one testcase per check result, named by what it checks.

A testcase is named ``check@era[case]`` (the result's label), its classname is the
contract area (section of its first requirement / check family) and a failure's
message is the check's one-line verdict, with the rest of what the check said (its
detail: the offending results), the broken requirements, a command that reproduces it
and the evidence in the body. One testsuite per era (plus one
for checks that run once for every era) and a ``run`` suite whose ``run.verdict``
testcase fails whenever the run is not conformant (any exit code but 0, and
exit 0 with expected failures of a baseline), so an unreachable, incomplete or
baselined run is never an empty, green file.

The document satisfies both common schemas: the Ant-style ``JUnit.xsd`` (required
``properties``, ``system-out`` and ``system-err``, ``package`` and ``id`` on each
suite, a timestamp without zone) and Jenkins xUnit's ``junit-10.xsd`` (no
attribute on ``testsuites``).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._findings import area, blamed, catalog, reproduction
from engram_mcp.conformance._redact import redact
from engram_mcp.conformance._verdicts import identity, summary_lines, verdict_line
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Result, Run

# Characters XML 1.0 cannot carry (controls, lone surrogates, U+FFFE/U+FFFF): shown as escapes instead.
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_FAILURE = (Status.FAIL, Status.XPASS)
_SKIPPED = (Status.SKIP, Status.NA, Status.BLOCKED, Status.XFAIL)
_MESSAGE_CHARS = 500
_EVIDENCE_CHARS = 8000
RUN_SUITE, ANY_ERA = "run", "every era"


def _text(value: object) -> str:
    return _NOT_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", str(value))


def _one_line(result: Result) -> str:
    first = result.message.split("\n", 1)[0]
    return _text(first[:_MESSAGE_CHARS] or result.status.value)


def _body(run: Run, result: Result) -> str:
    entries = catalog()
    lines = [f"{result.status.value}: {result.message}" if result.message else result.status.value]
    if result.detail:
        lines.append(result.detail)
    lines.append("")
    for rid in blamed(result):
        lines.append(f"breaks {rid} ({entries[rid]['level']}, {entries[rid]['section']}): {entries[rid]['summary']}")
    lines.append(f"reproduce: {reproduction(run, result)}")
    if result.evidence:
        evidence = json.dumps(redact(result.evidence), ensure_ascii=False, sort_keys=True, default=str)
        lines.append("evidence: " + evidence[:_EVIDENCE_CHARS])
    return _text("\n".join(lines))


def _testcase(parent: ET.Element, name: str, classname: str, seconds: float) -> ET.Element:
    return ET.SubElement(parent, "testcase", name=_text(name), classname=_text(classname),
                         time=f"{max(seconds, 0):.3f}")


def _result_case(run: Run, suite: ET.Element, result: Result) -> str:
    case = _testcase(suite, result.label, area(result), result.duration)
    if result.status in _FAILURE:
        ET.SubElement(case, "failure", message=_one_line(result), type=result.status.value).text = _body(run, result)
        return "failures"
    if result.status is Status.ERROR:
        ET.SubElement(case, "error", message=_one_line(result), type=result.status.value).text = _body(run, result)
        return "errors"
    if result.status in _SKIPPED:
        ET.SubElement(case, "skipped", message=_text(f"{result.status.value}: {result.message}"[:_MESSAGE_CHARS]))
        return "skipped"
    if result.status is Status.PIN:  # no failure at this level; shown where CI shows what needs a look
        pins = ", ".join(blamed(result))
        ET.SubElement(case, "skipped", message=_text(f"PIN ({pins}; scored only by --level pins): "
                                                     f"{result.message}"[:_MESSAGE_CHARS]))
        return "skipped"
    return "passed"


def _suite(root: ET.Element, run: Run, name: str, index: int) -> ET.Element:
    suite = ET.SubElement(root, "testsuite", name=_text(name), package=_text(f"engram-mcp-conformance.{name}"),
                          id=str(index), timestamp=run.started_at.strftime("%Y-%m-%dT%H:%M:%S"),
                          hostname="localhost")
    properties = ET.SubElement(suite, "properties")
    facts = identity(run)
    facts.update(level=run.level, seed=run.seed, eras=list(run.eras))
    for key, value in facts.items():
        if value not in (None, [], {}):
            shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
            ET.SubElement(properties, "property", name=key, value=_text(shown))
    return suite


def _close(suite: ET.Element, tally: dict[str, int], seconds: float, out: str = "") -> None:
    suite.set("tests", str(sum(tally.values())))
    for key in ("failures", "errors", "skipped"):
        suite.set(key, str(tally.get(key, 0)))
    suite.set("time", f"{max(seconds, 0):.3f}")
    ET.SubElement(suite, "system-out").text = _text(out)
    ET.SubElement(suite, "system-err").text = ""


def junit_report(run: Run, code: int) -> bytes:
    root = ET.Element("testsuites")
    # The run's own verdict first: it fails unless the run is conformant, whatever the checks said.
    suite = _suite(root, run, RUN_SUITE, 0)
    verdict = verdict_line(run, code)
    case = _testcase(suite, "run.verdict", RUN_SUITE, 0.0)
    run_tally = {"passed": 1}
    baselined = any(r.status is Status.XFAIL for r in run.results)
    if code != 0 or baselined:
        kind = f"exit {code}" + (" with expected failures" if code == 0 else "")
        ET.SubElement(case, "failure", message=_text(verdict), type=kind).text = _text(
            "\n".join(summary_lines(run)).strip())
        run_tally = {"failures": 1}
    for era, why in run.unsupported_eras.items():
        refused = _testcase(suite, f"run.era@{era}", RUN_SUITE, 0.0)
        ET.SubElement(refused, "skipped", message=_text(f"the target does not speak the {era} era: {why}"))
        run_tally["skipped"] = run_tally.get("skipped", 0) + 1
    _close(suite, run_tally, 0.0, f"Engram memory over MCP {load().version}: {verdict}")
    groups: dict[str | None, list[Result]] = {era: [] for era in run.eras}
    for result in run.results:
        groups.setdefault(result.era, []).append(result)
    ran = [(era_of, results) for era_of, results in groups.items() if results]
    for index, (era_of, results) in enumerate(ran, start=1):
        suite = _suite(root, run, f"{era_of} era" if era_of else ANY_ERA, index)
        tally: dict[str, int] = {}
        for result in results:
            kind = _result_case(run, suite, result)
            tally[kind] = tally.get(kind, 0) + 1
        _close(suite, tally, sum(r.duration for r in results))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True) + b"\n"
