"""What a run concluded: each requirement's verdict, the exit code, and the summary said in words.

The verdict cannot overstate. A run scores the MUSTs of its level (``contract``:
the contract's requirements and the wiring the harness needs to act as host;
``profile``: this project's pins too). It is *conformant* only when every scored
MUST was exercised and passed in every era the target speaks; a scored MUST
left SKIP, BLOCKED or not run makes it *incomplete*, and a FAIL makes it *not
conformant*. A ``--select`` run is partial: at best incomplete, never certified.
The report files (``_report``) render what this module concludes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance import _readiness as readiness
from engram_mcp.conformance._checks import SOURCES_SCORED, Status, worst
from engram_mcp.conformance._defaults import (
    EXIT_CONFORMANT,
    EXIT_INCOMPLETE,
    EXIT_MUST_FAILED,
    EXIT_NOT_ENGRAM,
    EXIT_STALE,
    EXIT_UNREACHABLE,
)
from engram_mcp.conformance._findings import requirement_outcomes
from engram_mcp.conformance._profile import NEEDS_PROFILE
from engram_mcp.conformance._words import clipped
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Run

MUST_LEVELS = ("MUST", "MUST NOT")
# What a requirement's checks concluded, over every era of the run.
PASSED, FAILED, NOT_EXERCISED = "PASSED", "FAILED", "NOT_EXERCISED"
NOT_APPLICABLE, EXCLUDED = "NOT_APPLICABLE", "EXCLUDED"
_EXERCISED_OK = (Status.PASS, Status.WARN, Status.XPASS)
# The order the checks line counts statuses in: what passed, what failed, what was not exercised, the rest.
_ORDER = [s.value for s in (Status.PASS, Status.FAIL, Status.ERROR, Status.WARN, Status.PIN, Status.SKIP,
                            Status.BLOCKED, Status.NA, Status.XFAIL, Status.XPASS)]
_UNEXERCISED = (Status.SKIP, Status.BLOCKED, Status.ERROR)


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
    missing: tuple[str, ...] = ()  # the tools the check needed that the run could not give it


@dataclass
class _Gap:
    era: str
    check_id: str | None
    status: str
    reason: str
    missing: tuple[str, ...] = ()


@dataclass
class _Judged:
    outcome: str
    gaps: list[_Gap] = field(default_factory=list)


def _seen_by_requirement(run: Run) -> dict[str, list[_Seen]]:
    seen: dict[str, list[_Seen]] = defaultdict(list)
    for result in run.results:
        for rid, (status, message) in requirement_outcomes(result).items():
            seen[rid].append(_Seen(result.check_id, result.era, status, message, result.not_applicable,
                                   result.missing))
    return seen


def _unlock(gap: _Gap, selected: bool) -> str:
    """What would let the requirement be exercised, from the status and the check's own message."""
    if gap.missing:
        return "serve the tools it needs, and grant them to a principal of the profile"
    if gap.status == "NOT_RUN":
        return "run without --select" if selected else "no check of this requirement ran in this era"
    if gap.status == "BLOCKED":
        return "make the prerequisite named in the reason succeed"
    if gap.status == "ERROR":
        return "fix the harness or environment error, then rerun"
    return next((unlock for said, unlock in _UNLOCKS if said in gap.reason), "give the profile what the reason names")


# A SKIP reason's words, and what lifts it (first match wins).
_UNLOCKS = (
    ("--explore 0", "run with exploration on (leave --explore out, or give it a budget above 0)"),
    ("--deep", "run with --deep, or shorten the wait in the profile"),
    (NEEDS_PROFILE,
     "pass --profile (`engram-reference init DIR` writes an example; spec/profile.md documents every key)"),
)


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
            gaps.append(_Gap(era, s.check_id, s.status.value, s.message or s.status.value, s.missing))
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
                               "unlock": _unlock(g, selected), **({"missing": list(g.missing)} if g.missing else {})}
                              for g in judged.gaps],
        }
    return verdicts


def musts(verdicts: dict[str, dict[str, Any]], *, scored: bool = True,
          source: str | None = None) -> dict[str, dict[str, Any]]:
    """The MUSTs this run scores, or (scored=False) the established MUSTs of one source, scored or not."""
    return {rid: v for rid, v in verdicts.items() if v["level"] in MUST_LEVELS
            and (v["scored"] if scored else v["status"] == "established") and (source is None or v["source"] == source)}


def tally(verdicts: dict[str, dict[str, Any]]) -> dict[str, int]:
    """passed + failed + not exercised = scored; scored + excluded (unobservable, or not applicable to this run)
    = total."""
    counted = {"total": len(verdicts), "scored": 0, "passed": 0, "failed": 0, "not_exercised": 0, "excluded": 0,
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
    counted["scored"] = counted["passed"] + counted["failed"] + counted["not_exercised"]
    return counted


def exit_code(run: Run) -> int:
    if run.unreachable or run.not_engram:  # not-engram before any MUST: what it fails says no more than that
        return EXIT_UNREACHABLE if run.unreachable else EXIT_NOT_ENGRAM
    verdicts = requirement_verdicts(run)
    scored = musts(verdicts)
    if any(v["verdict"] == Status.FAIL.value or (v["outcome"] == FAILED and v["verdict"] != Status.XFAIL.value)
           for v in scored.values()):
        return EXIT_MUST_FAILED
    if any(r.status is Status.XPASS for r in run.results):
        return EXIT_STALE
    if any(r.status is Status.ERROR for r in run.results):
        return EXIT_UNREACHABLE
    # A server that does not serve all six tools is never certified, whatever its checks concluded.
    partly_served = any(served is not True for served in run.served.values())
    if run.selected or partly_served or any(v["outcome"] == NOT_EXERCISED for v in scored.values()):
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
        3: ("VERDICT: not judged (the profile does not fit the target: correct the profile)" if run.profile_refused
            else "VERDICT: not judged (target unreachable or environment error)"),
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


NEEDS_TOOLS = ("checks that need a tool the target does not serve, or the profile grants to no principal (the tools "
               "table says which)")


def grouped_gaps(verdicts: dict[str, dict[str, Any]]) -> list[tuple[str, str, list[str]]]:
    """(reason, unlock, ["EMC-X (era)", …]) for the not-exercised scored MUSTs, grouped by reason; every gap of a
    check that needed a tool the run could not give is one reason, said once."""
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for rid, v in sorted(verdicts.items()):
        if v["outcome"] != NOT_EXERCISED:
            continue
        eras_by_reason: dict[tuple[str, str], list[str]] = defaultdict(list)
        for gap in v["not_exercised"]:
            reason = NEEDS_TOOLS if gap.get("missing") else (
                f"{gap['check'] + ': ' if gap['check'] else ''}{gap['reason']}")
            key = (reason, gap["unlock"])
            if gap["era"] not in eras_by_reason[key]:
                eras_by_reason[key].append(gap["era"])
        for key, eras in eras_by_reason.items():
            groups[key].append(f"{rid} ({', '.join(eras)})")
    return [(reason, unlock, ids) for (reason, unlock), ids in groups.items()]


def _count_line(label: str, t: dict[str, int]) -> str:
    return (f"{label}: {t['passed']} passed, {t['failed']} failed, {t['not_exercised']} not exercised "
            f"(of {t['scored']}); {t['excluded']} more excluded ({t['unobservable']} not observable on the wire, "
            f"{t['not_applicable']} not applicable to this run), {t['total']} in all")


def summary_lines(run: Run, *, limit: int = 40) -> list[str]:
    code = exit_code(run)
    verdicts = requirement_verdicts(run)
    level = level_of(run)
    scored = musts(verdicts)
    lines = ["", f"Engram memory over MCP {load().version} — target {run.target_identity}",
             f"level: {level} (scores {' + '.join(sorted(SOURCES_SCORED[level]))} requirements); "
             f"eras: {', '.join(spoken_eras(run)) or 'none'}; transport: {run.target.kind}"
             + ("; deep" if run.deep else "")]
    lines.extend(_what_stopped_the_run(run))
    if not run.unreachable and not run.not_engram and run.served:
        lines.append("tools (what the preflight learnt; then the checks that call each):")
        lines.extend(readiness.table_lines(run, scored))
        said = readiness.sentence(run, scored)
        if said:
            lines.append(said)
    lines.extend(run.notes)
    ran = ", ".join(f"{v} {k}" for k, v in sorted(counts(run).items(), key=lambda kv: _ORDER.index(kv[0])))
    stopped = ", the profile does not fit the target" if run.profile_refused else ", the target was not reached"
    lines.append("checks: " + (ran or "none ran" + (stopped if run.unreachable else "")))
    explored = _explored(run)
    if explored:
        lines.append(explored)
    if run.unreachable and not ran:  # nothing was tried: counting all of it "not exercised" reads as a gap
        lines.append(f"scored MUSTs: none judged ({tally(scored)['scored']} scored at the {level} level)")
    else:
        lines.append(_count_line(f"scored MUSTs at the {level} level", tally(scored)))
    for rid, v in sorted(scored.items()):
        if v["outcome"] == FAILED:
            lines.append(f"  {'XFAIL' if v['verdict'] == 'XFAIL' else 'FAIL'} {rid}")
    groups = [] if run.unreachable or run.not_engram else grouped_gaps(scored)
    if groups:
        lines.append("not exercised (scored MUSTs), with the reason and what would unlock them:")
        for shown, (reason, unlock, ids) in enumerate(groups):
            if shown >= limit:
                lines.append(f"  … and {len(groups) - shown} more reasons (report.jsonl lists every one)")
                break
            listed = ", ".join(ids[:12]) + (f", … ({len(ids)} in all)" if len(ids) > 12 else "")
            lines.append(f"  - {clipped(reason, 240)} → {unlock}: {listed}")
    if level == "contract" and not run.unreachable:
        pins = musts(verdicts, scored=False, source="pin")
        lines.append(_count_line("this project's pins (reported, not scored; --level pins scores "
                                 "them)", tally(pins)))
        failed_pins = sorted(rid for rid, v in pins.items() if v["outcome"] == FAILED)
        if failed_pins:
            lines.append("  pins failed: " + ", ".join(failed_pins))
    lines.append(verdict_line(run, code))
    return lines


def _what_stopped_the_run(run: Run) -> list[str]:
    """Said first, before any count: the target not reached, not an Engram server, or an era it does not speak."""
    lines = []
    if run.unreachable:
        lines.append(f"{'PROFILE DOES NOT FIT THE TARGET' if run.profile_refused else 'TARGET UNREACHABLE'}: "
                     f"{run.unreachable}")
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
            calls, programs, seconds = (explored.get(key, 0) for key in ("calls", "programs", "seconds"))
            parts.append(f"{result.era or 'every era'} {calls} calls in {programs} programs ({seconds} s, {reached} "
                         "tool/situation/outcome triples)")
    return "explored: " + "; ".join(parts) if parts else None


def profile_label(run: Run) -> str:
    profile = run.profile
    if profile is not None and not profile.given:
        return "none (only what needs no host identity was run)"
    path = profile.path if profile is not None else None
    named = f"`{path.name}`" if path is not None else "as given to the run"
    return named + (f" (`{run.profile_digest}`)" if run.profile_digest else "")


def utc_stamp(moment: datetime | None) -> str | None:
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
        "started_at": utc_stamp(run.started_at), "finished_at": utc_stamp(run.finished_at),
    }


# Every file write_reports() may leave in the report directory.
