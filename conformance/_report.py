"""The report files of a run, rendered from what ``_verdicts`` concludes.

report.jsonl is canonical (a header naming the run — target, server identity,
profile digest, selection, dates —, one line per check result with its case id,
a footer with the verdict of every requirement); report.md, report.html
(``_html``), junit.xml (``_junit``) and badge.json are derived from the same
data, and certificate.md is written only when the run is conformant.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance import _defaults
from engram_mcp.conformance import _readiness as readiness
from engram_mcp.conformance._checks import SOURCES_SCORED, Status
from engram_mcp.conformance._defaults import ATTESTATION_FILE
from engram_mcp.conformance._findings import blamed
from engram_mcp.conformance._html import html_report
from engram_mcp.conformance._junit import junit_report
from engram_mcp.conformance._redact import redact
from engram_mcp.conformance._verdicts import (
    counts,
    exit_code,
    grouped_gaps,
    identity,
    level_of,
    musts,
    profile_label,
    requirement_verdicts,
    spoken_eras,
    summary_lines,
    tally,
    utc_stamp,
    verdict_line,
)
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Run

REPORT_FILES = _defaults.REPORT_FILES


def write_reports(run: Run, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    verdicts = requirement_verdicts(run)
    code = exit_code(run)
    header = {
        "type": "header", **identity(run),
        "eras": list(run.eras), "level": level_of(run), "deep": run.deep,
        "partial": run.selected, "seed": run.seed,
        "profile_given": bool(run.profile and run.profile.given),  # `conformance sign` rebuilds the predicate
        "examples": run.examples, "strict": run.strict, "unsupported_eras": run.unsupported_eras,
        "started": utc_stamp(run.started_at),
    }
    lines = [header]
    for r in run.results:
        line = {"type": "check", "check": r.check_id, "era": r.era, "case": r.case, "label": r.label,
                "status": r.status.value, "requirements": list(r.requirements), "message": r.message,
                "duration": round(r.duration, 4), "evidence": redact(r.evidence)}
        if r.detail:
            line["detail"] = r.detail  # the failure's lines after its one-line verdict (message)
        if r.tools:
            line["tools"] = list(r.tools)  # the Engram tools the case calls, as its check declares them
        if r.missing:
            line["missing_tools"] = list(r.missing)  # those the run could not give it: why it was not exercised
        if r.pins:
            line["pins"] = {rid: ("FAIL: " + "; ".join(m)) if m else "PASS" for rid, m in r.pins.items()}
        if r.raw is not None:
            line["asserted"] = r.raw.value  # what the check's own assertions concluded, beside the status shown
        if blamed(r):
            line["blamed"] = list(blamed(r))
        lines.append(line)
    scored = musts(verdicts)
    footer = {"type": "footer", "exit_code": code, "verdict": verdict_line(run, code), "unreachable": run.unreachable,
              "counts": counts(run), "scored_musts": tally(scored),
              "tools": [row.as_data() for row in readiness.rows(run, scored)],
              "pins": tally(musts(verdicts, scored=False, source="pin")),
              "requirements": verdicts}
    lines.append(footer)
    jsonl = "".join(json.dumps(x, ensure_ascii=False, sort_keys=True) + "\n" for x in lines)
    (directory / REPORT_FILES[0]).write_text(jsonl, encoding="utf-8")
    document = markdown_report(run, verdicts, code)
    (directory / "report.md").write_text(document, encoding="utf-8")
    certificate_file = directory / "certificate.md"
    if code == 0 and not any(r.status is Status.XFAIL for r in run.results):
        certificate_file.write_text(document, encoding="utf-8")
    elif certificate_file.exists():
        certificate_file.unlink()  # an earlier run's certificate must not outlive this verdict
    (directory / "report.html").write_text(html_report(run, verdicts, code), encoding="utf-8")
    (directory / "junit.xml").write_bytes(junit_report(run, code))
    (directory / "badge.json").write_text(json.dumps(badge(run)) + "\n", encoding="utf-8")


def badge(run: Run) -> dict[str, Any]:
    """A shields.io endpoint badge."""
    code = exit_code(run)
    level = level_of(run)
    message, color = {0: ("conformant", "brightgreen"), 1: ("not conformant", "red"),
                      3: ("not judged", "lightgrey"), 4: ("stale baseline", "orange"),
                      6: ("not an Engram memory server", "red"),
                      5: ("partial run" if run.selected else "incomplete", "yellow")}[code]
    if code == 0 and any(r.status is Status.XFAIL for r in run.results):
        message, color = "baseline failures", "orange"
    return {"schemaVersion": 1, "label": f"engram-mcp {load().version} {level}", "message": message, "color": color}


def _rows(verdicts: dict[str, dict[str, Any]]) -> str:
    return "\n".join(f"| {rid} | {v['level']} | {v['source']} | {v['status']} | {v['outcome']} | {v['verdict']} |"
                     for rid, v in sorted(verdicts.items()))


def markdown_report(run: Run, verdicts: dict[str, dict[str, Any]], code: int) -> str:
    level = level_of(run)
    baselined = any(r.status is Status.XFAIL for r in run.results)
    certified = code == 0 and not baselined
    if certified:
        title = f"Certificate of conformance — contract {load().version}, {level} level"
    elif run.selected:
        title = "Partial conformance report (--select) — not a certificate"
    else:
        title = {1: "Conformance report (not conformant)", 3: "Conformance report (not judged)",
                 4: "Conformance report (stale baseline)", 5: "Conformance report (incomplete) — not a certificate",
                 6: "Conformance report (not an Engram memory server)",
                 0: "Conformance report (failures expected by the baseline) — not a certificate"}[code]
    scored = {rid: v for rid, v in verdicts.items() if v["scored"]}
    pins = {rid: v for rid, v in verdicts.items() if v["source"] == "pin" and not v["scored"]}
    gaps = "\n".join(f"- {reason} → {unlock}: {', '.join(ids)}"
                     for reason, unlock, ids in grouped_gaps(musts(verdicts)))
    table_head = ("| Requirement | Level | Source | Contract status | Outcome | Worst check |\n"
                  "|---|---|---|---|---|---|\n")
    started, finished = utc_stamp(run.started_at), utc_stamp(run.finished_at)
    signed = ATTESTATION_FILE
    return (
        f"# {title}\n\n"
        f"- Contract: Engram memory over MCP {load().version} (`{load().digest}`)\n"
        f"- Level: {level} — scores {', '.join(sorted(SOURCES_SCORED[level]))} requirements\n"
        f"- Target: `{run.target_identity}` (transport: {', '.join(run.transports)})\n"
        f"- Server identity: {run.server_identity or 'not given by the target'}\n"
        f"- Eras exercised: {', '.join(spoken_eras(run)) or 'none'} (asked: {', '.join(run.eras)})\n"
        f"- Profile: {profile_label(run)}\n"
        f"- Date: {started or 'not started'}" + (f" to {finished}" if finished else "") + " (UTC)\n"
        + (f"- Selection: {', '.join(f'`{s}`' for s in run.select)}\n" if run.select else "")
        + f"- Deep mode: {'yes' if run.deep else 'no'}; seed: {run.seed}; harness: {run.harness_version}\n"
        f"- Exit code: {code}\n"
        + (f"- Signed attestation: `{signed}` beside this file when the run was signed "
           f"(`--sign-key`); check it with `conformance verify-certificate {signed} --key PUBLIC "
           "--report report.jsonl`. This text alone proves nothing: anyone can edit it.\n" if certified else "")
        + "\n```\n" + "\n".join(summary_lines(run)[1:]) + "\n```\n\n"
        "Requirements marked unverified by the contract are reported, not scored"
        + (" (scored here: --strict)" if run.strict else "") + ".\n\n"
        + (f"## Tools\n\n{readiness.markdown(run, musts(verdicts))}\n\n" if run.served else "")
        + (f"## Scored MUSTs not exercised\n\n{gaps}\n\n" if gaps else "")
        + f"## Scored requirements ({level} level)\n\n{table_head}{_rows(scored)}\n\n"
        + (f"## Pins (this project's choices; not scored at the contract level)\n\n{table_head}"
           f"{_rows(pins)}\n\n" if pins else "")
        + "## Other requirements (unverified or not scored)\n\n" + table_head
        + _rows({rid: v for rid, v in verdicts.items() if rid not in scored and rid not in pins}) + "\n"
    )
