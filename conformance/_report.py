"""Verdicts, exit codes and the report files of a run.

report.jsonl is canonical (a header naming the run — target, server identity,
profile digest, selection, dates —, one line per check result with its case id,
a footer with the verdict of every requirement); report.md, report.html
(``_html``), junit.xml (``_junit``) and badge.json are derived from the same
data, and certificate.md is written only when the run is conformant.

The verdict cannot overstate. A run scores the MUSTs of its level (``contract``:
the contract's requirements and the wiring the harness needs to act as host;
``profile``: this project's pins too). It is *conformant* only when every scored
MUST was exercised and passed in every era the target speaks; a scored MUST
left SKIP, BLOCKED or not run makes it *incomplete*, and a FAIL makes it *not
conformant*. A ``--select`` run is partial: at best incomplete, never certified.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance._checks import SOURCES_SCORED, Status, worst
from engram_mcp.conformance._findings import blamed, requirement_outcomes
from engram_mcp.conformance._profile import NEEDS_PROFILE
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Run

_SECRET_KEYS = re.compile(r"binding|token|authorization|_meta|requeststate|request_state|key$", re.I)
MUST_LEVELS = ("MUST", "MUST NOT")
# What a requirement's checks concluded, over every era of the run.
PASSED, FAILED, NOT_EXERCISED = "PASSED", "FAILED", "NOT_EXERCISED"
NOT_APPLICABLE, EXCLUDED = "NOT_APPLICABLE", "EXCLUDED"
_EXERCISED_OK = (Status.PASS, Status.WARN, Status.XPASS)
_UNEXERCISED = (Status.SKIP, Status.BLOCKED, Status.ERROR)


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


def level_of(run: Run) -> str:
    return run.level


def spoken_eras(run: Run) -> list[str]:
    return [era for era in run.eras if era not in run.unsupported_eras]


@dataclass
class _Seen:
    """One check's conclusion about one requirement in one era (None: every era)."""

    check_id: str
    era: str | None
    status: Status
    message: str
    not_applicable: bool = False


@dataclass
class _Gap:
    era: str
    check_id: str | None
    status: str
    reason: str


@dataclass
class _Judged:
    outcome: str
    gaps: list[_Gap] = field(default_factory=list)


def _seen_by_requirement(run: Run) -> dict[str, list[_Seen]]:
    seen: dict[str, list[_Seen]] = defaultdict(list)
    for result in run.results:
        for rid, (status, message) in requirement_outcomes(result).items():
            seen[rid].append(_Seen(result.check_id, result.era, status, message, result.not_applicable))
    return seen


def _unlock(gap: _Gap, selected: bool) -> str:
    """What would let the requirement be exercised, from the status and the check's own message."""
    if gap.status == "NOT_RUN":
        return "run without --select" if selected else "no check of this requirement ran in this era"
    if gap.status == "BLOCKED":
        return "make the prerequisite named in the reason succeed"
    if gap.status == "ERROR":
        return "fix the harness or environment error, then rerun"
    if "--deep" in gap.reason:
        return "run with --deep, or shorten the wait in the profile"
    if gap.reason.startswith(NEEDS_PROFILE):
        return "pass --profile (`engram-reference init DIR` writes an example; spec/profile.md documents every key)"
    return "give the profile what the reason names"


def _judge(entry: dict[str, Any], seen: list[_Seen], eras: list[str], selected: bool) -> _Judged:
    if not seen and entry.get("exclusion"):
        return _Judged(EXCLUDED)
    if any(s.status is Status.FAIL or s.status is Status.XFAIL for s in seen):
        return _Judged(FAILED)
    needed = [era for era in entry["eras"] if era in eras]
    gaps: list[_Gap] = []
    applicable = False
    for era in needed:
        here = [s for s in seen if s.era in (era, None)]
        counted = [s for s in here if not s.not_applicable]
        if here and not counted:
            continue  # every check says the requirement has nothing to exercise in this era
        applicable = True
        blocking = [s for s in counted if s.status in _UNEXERCISED]
        for s in blocking:
            gaps.append(_Gap(era, s.check_id, s.status.value, s.message or s.status.value))
        if not blocking and not any(s.status in _EXERCISED_OK for s in counted):
            gaps.append(_Gap(era, None, "NOT_RUN", "not run (--select)" if selected else "no check ran"))
    if gaps:
        return _Judged(NOT_EXERCISED, gaps)
    return _Judged(PASSED if applicable else NOT_APPLICABLE)


def requirement_verdicts(run: Run) -> dict[str, dict[str, Any]]:
    """Every requirement: its level, source, whether this run scores it, the worst check status and the outcome."""
    catalog = load().requirements["requirements"]
    seen = _seen_by_requirement(run)
    sources = SOURCES_SCORED[level_of(run)]
    eras = spoken_eras(run)
    selected = run.selected
    verdicts = {}
    for entry in catalog:
        rid = entry["id"]
        statuses = [s.status for s in seen.get(rid, [])]
        verdict = worst(statuses).value if statuses else ("EXCLUDED" if entry.get("exclusion") else "NOT_RUN")
        judged = _judge(entry, seen.get(rid, []), eras, selected)
        verdicts[rid] = {
            "level": entry["level"], "status": entry["status"], "source": entry["source"],
            "scored": (entry["status"] == "established" or run.strict) and entry["source"] in sources,
            "verdict": verdict, "outcome": judged.outcome,
            "not_exercised": [{"era": g.era, "check": g.check_id, "status": g.status, "reason": g.reason,
                               "unlock": _unlock(g, selected)} for g in judged.gaps],
        }
    return verdicts


def _must(verdicts: dict[str, dict[str, Any]], *, scored: bool = True,
          source: str | None = None) -> dict[str, dict[str, Any]]:
    """The MUSTs this run scores, or (scored=False) the established MUSTs of one source, scored or not."""
    return {rid: v for rid, v in verdicts.items() if v["level"] in MUST_LEVELS
            and (v["scored"] if scored else v["status"] == "established") and (source is None or v["source"] == source)}


def tally(verdicts: dict[str, dict[str, Any]]) -> dict[str, int]:
    """passed + failed + not exercised + excluded (unobservable, or not applicable to this run) = total."""
    counted = {"total": len(verdicts), "passed": 0, "failed": 0, "not_exercised": 0, "excluded": 0,
               "unobservable": 0, "not_applicable": 0}
    for v in verdicts.values():
        outcome = v["outcome"]
        if outcome == PASSED:
            counted["passed"] += 1
        elif outcome == FAILED:
            counted["failed"] += 1
        elif outcome == NOT_EXERCISED:
            counted["not_exercised"] += 1
        else:
            counted["excluded"] += 1
            counted["unobservable" if outcome == EXCLUDED else "not_applicable"] += 1
    return counted


def exit_code(run: Run) -> int:
    from engram_mcp.conformance._run import (
        EXIT_CONFORMANT,
        EXIT_INCOMPLETE,
        EXIT_MUST_FAILED,
        EXIT_NOT_ENGRAM,
        EXIT_STALE,
        EXIT_UNREACHABLE,
    )

    if run.unreachable or run.not_engram:  # not-engram before any MUST: what it fails says no more than that
        return EXIT_UNREACHABLE if run.unreachable else EXIT_NOT_ENGRAM
    verdicts = requirement_verdicts(run)
    scored = _must(verdicts)
    if any(v["verdict"] == Status.FAIL.value or (v["outcome"] == FAILED and v["verdict"] != Status.XFAIL.value)
           for v in scored.values()):
        return EXIT_MUST_FAILED
    if any(r.status is Status.XPASS for r in run.results):
        return EXIT_STALE
    if any(r.status is Status.ERROR for r in run.results):
        return EXIT_UNREACHABLE
    if run.selected or any(v["outcome"] == NOT_EXERCISED for v in scored.values()):
        return EXIT_INCOMPLETE
    return EXIT_CONFORMANT


def verdict_line(run: Run, code: int | None = None) -> str:
    code = exit_code(run) if code is None else code
    level = level_of(run)
    partial = run.selected
    baselined = any(r.status is Status.XFAIL for r in run.results)
    return {
        0: (f"VERDICT: conformant to contract {load().version} at the {level} level"
            if not baselined else "VERDICT: no failure beyond the baseline (not conformant: expected failures remain), "
            f"{level} level"),
        1: "VERDICT: not conformant (a MUST failed)",
        3: "VERDICT: not judged (target unreachable or environment error)",
        4: "VERDICT: stale baseline (an expected failure now passes)",
        6: "VERDICT: not an Engram memory server (it offers none of the six tools)",
        5: ("VERDICT: incomplete — partial run (--select): a partial report, never a certificate" if partial
            else f"VERDICT: incomplete — scored MUSTs were not exercised, so the {level} level is not certified"),
    }[code]


def counts(run: Run) -> dict[str, int]:
    tally_: dict[str, int] = defaultdict(int)
    for result in run.results:
        tally_[result.status.value] += 1
    return dict(tally_)


def _grouped_gaps(verdicts: dict[str, dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """(reason, unlock, ["EMC-X (era)", …]) for the not-exercised scored MUSTs, grouped by reason."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rid, v in sorted(verdicts.items()):
        if v["outcome"] != NOT_EXERCISED:
            continue
        eras_by_reason: dict[tuple[str, str], list[str]] = defaultdict(list)
        for gap in v["not_exercised"]:
            key = (f"{gap['check'] + ': ' if gap['check'] else ''}{gap['reason']}", gap["unlock"])
            if gap["era"] not in eras_by_reason[key]:
                eras_by_reason[key].append(gap["era"])
        for key, eras in eras_by_reason.items():
            groups[key].append(f"{rid} ({', '.join(eras)})")
    return [(reason, unlock, ids) for (reason, unlock), ids in groups.items()]


def clipped(text: str, limit: int) -> str:
    """At most ``limit`` characters, cut between words (never inside one), with an ellipsis when cut."""
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    cut = head.rsplit(None, 1)[0] if " " in head.strip() else head
    return cut.rstrip(" ,;:") + "…"


def _count_line(label: str, t: dict[str, int], what: str = "") -> str:
    return (f"{label}: {t['passed']} passed, {t['failed']} failed, {t['not_exercised']} not exercised, "
            f"{t['excluded']} excluded ({t['unobservable']} unobservable, {t['not_applicable']} not applicable "
            f"to this run) = {t['total']}{what}")


def summary_lines(run: Run, *, limit: int = 40) -> list[str]:
    code = exit_code(run)
    verdicts = requirement_verdicts(run)
    level = level_of(run)
    scored = _must(verdicts)
    lines = ["", f"Engram memory over MCP {load().version} — target {run.target_identity}",
             f"level: {level} (scores {' + '.join(sorted(SOURCES_SCORED[level]))} requirements); "
             f"eras: {', '.join(spoken_eras(run)) or 'none'}; transport: {run.target.kind}"
             + ("; deep" if run.deep else "")]
    lines.extend(_what_stopped_the_run(run))
    lines.extend(run.notes)
    ran = ", ".join(f"{k} {v}" for k, v in sorted(counts(run).items()))
    lines.append("checks: " + (ran or "none ran" + (", the target was not reached" if run.unreachable else "")))
    explored = _explored(run)
    if explored:
        lines.append(explored)
    if run.unreachable and not ran:  # nothing was tried: counting all of it "not exercised" reads as a gap
        lines.append(f"MUST requirements: none judged ({tally(scored)['total']} scored at the {level} level)")
    else:
        lines.append(_count_line("MUST requirements", tally(scored), f" scored at the {level} level"))
    for rid, v in sorted(scored.items()):
        if v["outcome"] == FAILED:
            lines.append(f"  {'XFAIL' if v['verdict'] == 'XFAIL' else 'FAIL'} {rid}")
    groups = [] if run.unreachable or run.not_engram else _grouped_gaps(scored)
    if groups:
        lines.append("not exercised (scored MUSTs), with the reason and what would unlock them:")
        for shown, (reason, unlock, ids) in enumerate(groups):
            if shown >= limit:
                lines.append(f"  … and {len(groups) - shown} more reasons (report.jsonl lists every one)")
                break
            listed = ", ".join(ids[:12]) + (f", … ({len(ids)} in all)" if len(ids) > 12 else "")
            lines.append(f"  - {clipped(reason, 240)} → {unlock}: {listed}")
    if level == "contract" and not run.unreachable:
        pins = _must(verdicts, scored=False, source="profile")
        lines.append(_count_line("profile pins (reported, not scored; --level profile scores them)", tally(pins)))
        failed_pins = sorted(rid for rid, v in pins.items() if v["outcome"] == FAILED)
        if failed_pins:
            lines.append("  profile pins failed: " + ", ".join(failed_pins))
    lines.append(verdict_line(run, code))
    return lines


def _what_stopped_the_run(run: Run) -> list[str]:
    """Said first, before any count: the target not reached, not an Engram server, or an era it does not speak."""
    lines = []
    if run.unreachable:
        lines.append(f"{'PROFILE REFUSED' if run.profile_refused else 'TARGET UNREACHABLE'}: {run.unreachable}")
    if run.not_engram:
        lines.append(f"NOT AN ENGRAM MEMORY SERVER: {run.not_engram}")
    lines.extend(f"era {era} not spoken by the target ({why}): its checks are SKIPPED"
                 for era, why in run.unsupported_eras.items())
    return lines


def _explored(run: Run) -> str | None:
    """One line on what exploration did per era: calls, programs, time, and how many situations it reached."""
    parts = []
    for result in run.results:
        explored = result.evidence.get("explored") if result.check_id == "explore.sequences" else None
        if isinstance(explored, dict):
            reached = len(result.evidence.get("coverage") or {})
            parts.append(f"{result.era} {explored.get('calls')} calls in {explored.get('programs')} programs "
                         f"({explored.get('seconds')} s, {reached} tool/situation/outcome triples)")
    return "explored: " + "; ".join(parts) if parts else None


def _profile_label(run: Run) -> str:
    profile = run.profile
    if profile is not None and not profile.given:
        return "none (only what needs no host identity was run)"
    path = profile.path if profile is not None else None
    named = f"`{path.name}`" if path is not None else "as given to the run"
    return named + (f" (`{run.profile_digest}`)" if run.profile_digest else "")


def _utc(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if moment is not None else None


def identity(run: Run) -> dict[str, Any]:
    """Who and what was certified, when, under which profile and selection: the same in every report."""
    return {
        "harness_version": run.harness_version, "contract": load().version, "contract_digest": load().digest,
        "target": run.target_identity, "transport": run.target.kind, "transports": list(run.transports),
        "server_info": {era: {"name": info.name, "version": info.version, "title": info.title}
                        for era, info in run.server_info.items()},
        "server_identity": run.server_identity,
        "profile": str(run.profile.path) if run.profile is not None and run.profile.path is not None else None,
        "profile_digest": run.profile_digest, "select": list(run.select),
        "started_at": _utc(run.started_at), "finished_at": _utc(run.finished_at),
    }


# Every file write_reports() may leave in the report directory.
REPORT_FILES = ("report.jsonl", "report.md", "certificate.md", "report.html", "junit.xml", "badge.json")


def write_reports(run: Run, directory: Path) -> None:
    from engram_mcp.conformance._html import html_report
    from engram_mcp.conformance._junit import junit_report

    directory.mkdir(parents=True, exist_ok=True)
    verdicts = requirement_verdicts(run)
    code = exit_code(run)
    header = {
        "type": "header", **identity(run),
        "eras": list(run.eras), "level": level_of(run), "deep": run.deep,
        "partial": run.selected, "seed": run.seed,
        "profile_given": bool(run.profile and run.profile.given),  # `conformance sign` rebuilds the predicate
        "examples": run.examples, "strict": run.strict, "unsupported_eras": run.unsupported_eras,
        "started": _utc(run.started_at),
    }
    lines = [header]
    for r in run.results:
        line = {"type": "check", "check": r.check_id, "era": r.era, "case": r.case, "label": r.label,
                "status": r.status.value, "requirements": list(r.requirements), "message": r.message,
                "duration": round(r.duration, 4), "evidence": redact(r.evidence)}
        if r.detail:
            line["detail"] = r.detail  # the failure's lines after its one-line verdict (message)
        if r.not_applicable:
            line["not_applicable"] = True
        if r.pins:
            line["pins"] = {rid: ("FAIL: " + "; ".join(m)) if m else "PASS" for rid, m in r.pins.items()}
        if r.raw is not None:
            line["asserted"] = r.raw.value  # what the check's own assertions concluded, beside the status shown
        if blamed(r):
            line["blamed"] = list(blamed(r))
        lines.append(line)
    scored = _must(verdicts)
    footer = {"type": "footer", "exit_code": code, "verdict": verdict_line(run, code), "unreachable": run.unreachable,
              "counts": counts(run), "scored_musts": tally(scored),
              "profile_pins": tally(_must(verdicts, scored=False, source="profile")),
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
    pins = {rid: v for rid, v in verdicts.items() if v["source"] == "profile" and not v["scored"]}
    gaps = "\n".join(f"- {reason} → {unlock}: {', '.join(ids)}"
                     for reason, unlock, ids in _grouped_gaps(_must(verdicts)))
    table_head = ("| Requirement | Level | Source | Contract status | Outcome | Worst check |\n"
                  "|---|---|---|---|---|---|\n")
    started, finished = _utc(run.started_at), _utc(run.finished_at)
    from engram_mcp.conformance._certificate import ATTESTATION_FILE as signed  # it reads this module

    return (
        f"# {title}\n\n"
        f"- Contract: Engram memory over MCP {load().version} (`{load().digest}`)\n"
        f"- Level: {level} — scores {', '.join(sorted(SOURCES_SCORED[level]))} requirements\n"
        f"- Target: `{run.target_identity}` (transport: {', '.join(run.transports)})\n"
        f"- Server identity: {run.server_identity or 'not given by the target'}\n"
        f"- Eras exercised: {', '.join(spoken_eras(run)) or 'none'} (asked: {', '.join(run.eras)})\n"
        f"- Profile: {_profile_label(run)}\n"
        f"- Date: {started}" + (f" to {finished}" if finished else "") + " (UTC)\n"
        + (f"- Selection: {', '.join(f'`{s}`' for s in run.select)}\n" if run.select else "")
        + f"- Deep mode: {'yes' if run.deep else 'no'}; seed: {run.seed}; harness: {run.harness_version}\n"
        f"- Exit code: {code}\n"
        + (f"- Signed attestation: `{signed}` beside this file when the run was signed "
           f"(`--sign-key`); check it with `conformance verify-certificate {signed} --key PUBLIC "
           "--report report.jsonl`. This text alone proves nothing: anyone can edit it.\n" if certified else "")
        + "\n```\n" + "\n".join(summary_lines(run)[1:]) + "\n```\n\n"
        "Requirements marked unverified by the contract are reported, not scored"
        + (" (scored here: --strict)" if run.strict else "") + ".\n\n"
        + (f"## Scored MUSTs not exercised\n\n{gaps}\n\n" if gaps else "")
        + f"## Scored requirements ({level} level)\n\n{table_head}{_rows(scored)}\n\n"
        + (f"## Profile pins (this project's choices; not scored at the contract level)\n\n{table_head}"
           f"{_rows(pins)}\n\n" if pins else "")
        + "## Other requirements (unverified or not scored)\n\n" + table_head
        + _rows({rid: v for rid, v in verdicts.items() if rid not in scored and rid not in pins}) + "\n"
    )
