"""Readiness by tool: which of the six tools the target serves, what the checks of each concluded, and what
serving the missing ones would unlock.

A server built tool by tool is judged on what it already serves (``_needs``); this is the table its summary
opens with, the same in the console, report.md, report.html and ``--format json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engram_mcp.conformance._checks import Status
from engram_mcp.conformance._needs import SHORT, TOOLS, Needs, short
from engram_mcp.contract import load

if TYPE_CHECKING:
    from engram_mcp.conformance._run import Run

SERVED, NOT_SERVED, NOT_GRANTED, UNKNOWN = "served", "not served", "not granted", "unknown"
_PASSED = (Status.PASS, Status.WARN, Status.PIN)
_FAILED = (Status.FAIL, Status.ERROR, Status.XPASS)
_NOT_EXERCISED = (Status.SKIP, Status.BLOCKED)


@dataclass(frozen=True)
class ToolRow:
    tool: str
    state: str  # SERVED, NOT_SERVED, NOT_GRANTED or UNKNOWN
    how: str  # how the preflight learnt it, in words
    passed: int
    failed: int
    not_exercised: int
    waiting: int  # scored MUSTs left unexercised because a check of theirs needed this tool

    def as_data(self) -> dict[str, Any]:
        return {"tool": self.tool, "state": self.state, "how": self.how, "checks": {
            "passed": self.passed, "failed": self.failed, "not_exercised": self.not_exercised},
            "scored_musts_waiting": self.waiting}


def case_tools(harness: Run, needs: Needs, params: Mapping[str, Any]) -> frozenset[str]:
    """The tools one case of a check calls: as declared, or, for a check that judges whatever the target serves,
    the tools it serves (every one, when the run could not tell)."""
    if needs.judges_served:
        known = harness.profile.given and bool(harness.served)
        return frozenset(tool for tool in load().tools if harness.served.get(tool) is True or not known)
    return needs.tools(params)


def unmet(harness: Run, tools: frozenset[str]) -> tuple[tuple[str, ...], str | None]:
    """(the tools a case needs that the run cannot give it, why) — not served, or granted to no principal."""
    order = list(load().tools)
    missing = tuple(sorted((t for t in tools if harness.served.get(t) is not True), key=order.index))
    if not missing:
        return (), None
    unserved = [t for t in missing if harness.served.get(t) is False]
    ungranted = [t for t in missing if t not in unserved]
    reasons = []
    if unserved:
        reasons.append(f"{' and '.join(unserved)}, which the target does not serve")
    if ungranted:
        reasons.append(f"{' and '.join(ungranted)}, which the profile grants to no principal")
    return missing, "needs " + "; and ".join(reasons)


def _state(run: Run, tool: str) -> str:
    served = run.served.get(tool)
    if served is True:
        return SERVED
    if served is False:
        return NOT_SERVED
    return NOT_GRANTED if run.profile is not None and run.profile.given else UNKNOWN


def waiting_on(verdicts: dict[str, dict[str, Any]]) -> dict[str, set[str]]:
    """tool -> the scored MUSTs not exercised because a check of theirs needed it (``verdicts`` scored only)."""
    found: dict[str, set[str]] = {tool: set() for tool in TOOLS}
    for rid, verdict in verdicts.items():
        for gap in verdict["not_exercised"]:
            for tool in gap.get("missing", ()):
                found[tool].add(rid)
    return found


def rows(run: Run, scored: dict[str, dict[str, Any]]) -> list[ToolRow]:
    """One row per tool, in the contract's order."""
    waiting = waiting_on(scored)
    table = []
    for tool in TOOLS:
        results = [r for r in run.results if tool in r.tools]
        table.append(ToolRow(tool, _state(run, tool), run.served_how.get(tool, ""),
                             sum(r.status in _PASSED for r in results), sum(r.status in _FAILED for r in results),
                             sum(r.status in _NOT_EXERCISED for r in results), len(waiting[tool])))
    return table


def sentence(run: Run, scored: dict[str, dict[str, Any]]) -> str | None:
    """What the target does not serve, and how many scored MUSTs serving it would unlock; None when it serves all."""
    table = rows(run, scored)
    if all(row.state == SERVED for row in table):
        return None
    if run.profile is None or not run.profile.given:
        return ("Without a conformance profile the harness cannot ask which of the six tools the target serves: "
                "a profile (--profile) lets it.")
    unserved = [row.tool for row in table if row.state == NOT_SERVED]
    ungranted = [row.tool for row in table if row.state in (NOT_GRANTED, UNKNOWN)]
    said = [f"The target serves {sum(row.state == SERVED for row in table)} of the six tools to this profile's "
            "principals."]
    if unserved:
        said.append(f"It does not serve {short(unserved)}: asked for {'it' if len(unserved) == 1 else 'them'}, it "
                    "answered as for an unknown tool.")
    if ungranted:
        said.append(f"It was not asked for {short(ungranted)}: the profile grants "
                    f"{'it' if len(ungranted) == 1 else 'them'} to no principal (from outside, a tool not granted "
                    "and a tool not served look the same).")
    missing = [row for row in table if row.state != SERVED]
    unlocked = len(set().union(*waiting_on(scored).values()))
    each = ", ".join(f"{SHORT[row.tool]} {row.waiting}" for row in missing)
    said.append(f"Serving and granting {'it' if len(missing) == 1 else 'them'} would let {unlocked} more scored "
                f"MUST{'s' if unlocked != 1 else ''} be exercised (waiting on each: {each}); a server that does not "
                "serve all six is never certified.")
    return " ".join(said)


TABLE_HEAD = ("tool", "served", "passed", "failed", "not exercised", "scored MUSTs waiting")


def markdown(run: Run, scored: dict[str, dict[str, Any]]) -> str:
    """The table (and its sentence) as report.md shows it."""
    lines = ["| Tool | Served | How the harness learnt it | Passed | Failed | Not exercised | Scored MUSTs waiting |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| `{r.tool}` | {r.state} | {r.how or '—'} | {r.passed} | {r.failed} | {r.not_exercised} | {r.waiting} |"
              for r in rows(run, scored)]
    said = sentence(run, scored)
    return "\n".join(lines) + (f"\n\n{said}" if said else "")


def table_lines(run: Run, scored: dict[str, dict[str, Any]]) -> list[str]:
    """The table as aligned console lines."""
    body = [(SHORT[r.tool], r.state, str(r.passed), str(r.failed), str(r.not_exercised), str(r.waiting))
            for r in rows(run, scored)]
    widths = [max(len(cell) for cell in column) for column in zip(TABLE_HEAD, *body, strict=True)]

    def line(cells: tuple[str, ...]) -> str:
        return "  " + "  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in
                                enumerate(zip(cells, widths, strict=True))).rstrip()

    return [line(TABLE_HEAD), *(line(cells) for cells in body)]
