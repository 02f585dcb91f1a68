"""Verdicts, exit codes and the report files of a run.

report.jsonl is canonical (a header, one line per check and era, a footer with
the verdict of every requirement); certificate.md, report.html and badge.json
are derived from the same data. junit.xml is pytest's own writer.
"""

from __future__ import annotations

import html
import json
import re
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance._checks import Status, worst
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._plugin import Run

HARNESS_VERSION = "0.1.0"
_SECRET_KEYS = re.compile(r"binding|token|authorization|_meta|requeststate|request_state|key$", re.I)
MUST_LEVELS = ("MUST", "MUST NOT")


def redact(value: Any, key: str = "") -> Any:
    """Evidence as published: no credential, no binding, and no long text."""
    if _SECRET_KEYS.search(key):
        return "[redacted]"
    if isinstance(value, dict):
        return {k: redact(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, key) for v in value[:50]]
    if isinstance(value, str) and len(value) > 200:
        return value[:200] + f"… [{len(value)} characters]"
    return value


def requirement_verdicts(run: Run) -> dict[str, dict[str, Any]]:
    catalog = {r["id"]: r for r in load().requirements["requirements"]}
    statuses: dict[str, list[Status]] = defaultdict(list)
    for result in run.results:
        for requirement in result.requirements:
            statuses[requirement].append(result.status)
    verdicts = {}
    for rid, entry in catalog.items():
        scored = entry["status"] == "established" or run.strict
        verdict = worst(statuses[rid]) if statuses[rid] else None
        verdicts[rid] = {
            "level": entry["level"], "status": entry["status"], "scored": scored,
            "verdict": verdict.value if verdict else ("EXCLUDED" if entry.get("exclusion") else "NOT_RUN"),
        }
    return verdicts


def exit_code(run: Run) -> int:
    from engram_mcp.conformance._plugin import EXIT_CONFORMANT, EXIT_MUST_FAILED, EXIT_STALE, EXIT_UNREACHABLE

    if run.unreachable:
        return EXIT_UNREACHABLE
    verdicts = requirement_verdicts(run)
    if any(v["scored"] and v["level"] in MUST_LEVELS and v["verdict"] == Status.FAIL.value for v in verdicts.values()):
        return EXIT_MUST_FAILED
    if any(r.status is Status.XPASS for r in run.results):
        return EXIT_STALE
    if any(r.status is Status.ERROR for r in run.results):
        return EXIT_UNREACHABLE
    return EXIT_CONFORMANT


def counts(run: Run) -> dict[str, int]:
    tally: dict[str, int] = defaultdict(int)
    for result in run.results:
        tally[result.status.value] += 1
    return dict(tally)


def summary_lines(run: Run) -> list[str]:
    code = exit_code(run)
    verdicts = requirement_verdicts(run)
    must = [v for v in verdicts.values() if v["scored"] and v["level"] in MUST_LEVELS]
    failed = sorted(rid for rid, v in verdicts.items() if v["scored"] and v["level"] in MUST_LEVELS and v["verdict"] == "FAIL")
    lines = ["", f"Engram memory over MCP {load().version} — target {run.target.label}"]
    if run.unreachable:
        lines.append(f"TARGET UNREACHABLE: {run.unreachable}")
    for era, why in run.unsupported_eras.items():
        lines.append(f"era {era} not spoken by the target ({why}): its checks are SKIPPED")
    lines.append("checks: " + ", ".join(f"{k} {v}" for k, v in sorted(counts(run).items())))
    lines.append(f"MUST requirements: {sum(v['verdict'] == 'PASS' for v in must)} passed, {len(failed)} failed, "
                 f"{sum(v['verdict'] in ('BLOCKED', 'ERROR', 'NOT_RUN') for v in must)} not verified, "
                 f"{sum(v['verdict'] == 'EXCLUDED' for v in must)} excluded")
    for rid in failed:
        lines.append(f"  FAIL {rid}")
    lines.append({0: "VERDICT: conformant", 1: "VERDICT: not conformant (a MUST failed)",
                  3: "VERDICT: not judged (target unreachable or environment error)",
                  4: "VERDICT: stale baseline (an expected failure now passes)"}[code])
    return lines


def write_reports(run: Run, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    verdicts = requirement_verdicts(run)
    header = {
        "type": "header", "harness_version": HARNESS_VERSION, "contract": load().version,
        "contract_digest": load().digest, "target": run.target.label, "eras": list(run.eras), "seed": run.seed,
        "examples": run.examples, "strict": run.strict, "unsupported_eras": run.unsupported_eras, "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(run.started)),
    }
    lines = [header]
    for r in run.results:
        lines.append({"type": "check", "check": r.check_id, "era": r.era, "status": r.status.value,
                      "requirements": list(r.requirements), "message": r.message, "duration": round(r.duration, 4),
                      "evidence": redact(r.evidence)})
    footer = {"type": "footer", "exit_code": exit_code(run), "unreachable": run.unreachable, "counts": counts(run),
              "requirements": verdicts}
    lines.append(footer)
    (directory / "report.jsonl").write_text("".join(json.dumps(x, ensure_ascii=False, sort_keys=True) + "\n" for x in lines),
                                            encoding="utf-8")
    (directory / "certificate.md").write_text(certificate(run, verdicts), encoding="utf-8")
    (directory / "report.html").write_text(html_report(run, verdicts), encoding="utf-8")
    (directory / "badge.json").write_text(json.dumps(badge(run)) + "\n", encoding="utf-8")


def badge(run: Run) -> dict[str, Any]:
    """A shields.io endpoint badge."""
    code = exit_code(run)
    message, color = {0: ("conformant", "brightgreen"), 1: ("not conformant", "red"),
                      3: ("not judged", "lightgrey"), 4: ("stale baseline", "orange")}[code]
    return {"schemaVersion": 1, "label": f"engram-mcp {load().version}", "message": message, "color": color}


def certificate(run: Run, verdicts: dict[str, dict[str, Any]]) -> str:
    code = exit_code(run)
    rows = "\n".join(
        f"| {rid} | {v['level']} | {v['status']} | {v['verdict']} |" for rid, v in sorted(verdicts.items())
    )
    title = "Certificate of conformance" if code == 0 else "Conformance report (not conformant)"
    return (
        f"# {title}\n\n"
        f"- Contract: Engram memory over MCP {load().version} (`{load().digest}`)\n"
        f"- Target: `{run.target.label}`\n- Eras: {', '.join(run.eras)}\n- Seed: {run.seed}\n"
        f"- Harness: {HARNESS_VERSION}\n- Exit code: {code}\n\n"
        + "\n".join(f"{line}" for line in summary_lines(run)[1:]) + "\n\n"
        "Requirements marked unverified by the contract are reported, not scored"
        + (" (scored here: --strict)" if run.strict else "") + ".\n\n"
        "| Requirement | Level | Contract status | Verdict |\n|---|---|---|---|\n" + rows + "\n"
    )


def html_report(run: Run, verdicts: dict[str, dict[str, Any]]) -> str:
    esc = html.escape
    check_rows = "".join(
        f"<tr class='{esc(r.status.value)}'><td>{esc(r.check_id)}</td><td>{esc(r.era or '')}</td><td>{esc(r.status.value)}</td>"
        f"<td>{esc(' '.join(r.requirements))}</td><td>{esc(r.message)}</td></tr>" for r in run.results
    )
    req_rows = "".join(
        f"<tr class='{esc(v['verdict'])}'><td>{esc(rid)}</td><td>{esc(v['level'])}</td><td>{esc(v['status'])}</td>"
        f"<td>{esc(v['verdict'])}</td></tr>" for rid, v in sorted(verdicts.items())
    )
    summary = "<br>".join(esc(line) for line in summary_lines(run) if line)
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Engram MCP conformance</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px}"
        ".FAIL,.ERROR,.XPASS{background:#fdd}.WARN,.BLOCKED{background:#ffd}.PASS{background:#dfd}</style></head><body>"
        f"<h1>Engram memory over MCP {esc(load().version)}</h1><p>{summary}</p>"
        f"<h2>Requirements</h2><table><tr><th>id</th><th>level</th><th>contract status</th><th>verdict</th></tr>{req_rows}</table>"
        f"<h2>Checks</h2><table><tr><th>check</th><th>era</th><th>status</th><th>requirements</th><th>message</th></tr>{check_rows}</table>"
        "</body></html>\n"
    )
