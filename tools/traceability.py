"""Traceability matrix of contract 1.0.0: which requirements are tested, excluded or uncovered.

    python tools/traceability.py [--format text|json|markdown] [--pin FILE]

The catalog comes from ``engram_mcp.contract.load().requirements``, never from
the data files directly. A requirement is *tested* when it lists a harness
check, *excluded* when it carries a written reason why the wire cannot show
it, and *uncovered* otherwise. Unverified requirements are listed apart and
never scored. Each row names its source: *contract* (the contract text says it
and the catalog cites the sentence), *wiring* (the host-wiring carriers the
harness needs to act as host; scored with the contract) or *profile* (this
project's pins, scored only by ``conformance --level pins``).

Exit status: 1 when an established MUST or MUST NOT is uncovered, else 0.
With ``--pin FILE`` the uncovered MUST list is compared instead with the ids
pinned in FILE (one per line, ``#`` starts a comment): 0 when they are the
same, 1 otherwise. A pin that still lists a requirement that is now covered
also fails, so the pin has to shrink as the harness grows.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LEVELS = ("MUST", "MUST NOT", "SHOULD", "SHOULD NOT", "MAY")
BINDING_LEVELS = frozenset({"MUST", "MUST NOT"})
COVERAGE = ("tested", "excluded", "uncovered")


@dataclass(frozen=True)
class Row:
    id: str
    level: str
    status: str
    section: str
    checks: tuple[str, ...]
    exclusion: str | None
    source: str = "contract"

    @property
    def coverage(self) -> str:
        if self.checks:
            return "tested"
        return "excluded" if self.exclusion else "uncovered"

    @property
    def scored(self) -> bool:
        return self.status == "established"

    @property
    def detail(self) -> str:
        if self.checks:
            return ", ".join(self.checks)
        return f"excluded: {self.exclusion}" if self.exclusion else "UNCOVERED"


def rows_of(catalog: Mapping[str, Any]) -> list[Row]:
    return [
        Row(
            id=item["id"],
            level=item["level"],
            status=item["status"],
            section=item["section"],
            checks=tuple(item.get("checks", ())),
            exclusion=item.get("exclusion"),
            source=item.get("source", "contract"),
        )
        for item in catalog["requirements"]
    ]


def uncovered_musts(rows: Sequence[Row]) -> list[str]:
    return [r.id for r in rows if r.scored and r.level in BINDING_LEVELS and r.coverage == "uncovered"]


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    per_level = {level: dict.fromkeys(COVERAGE, 0) for level in LEVELS}
    for row in rows:
        if row.scored:
            per_level[row.level][row.coverage] += 1
    per_source: dict[str, int] = {}
    for row in rows:
        if row.scored and row.level in BINDING_LEVELS:
            per_source[row.source] = per_source.get(row.source, 0) + 1
    return {
        "per_level": per_level,
        "musts_per_source": per_source,
        "unverified": [{"id": r.id, "level": r.level} for r in rows if not r.scored],
        "uncovered_musts": uncovered_musts(rows),
    }


# -- rendering -------------------------------------------------------------


def _shorten(text: str, width: int = 90) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def render_text(rows: Sequence[Row]) -> str:
    lines = [f"{'id':<14} {'level':<10} {'source':<9} {'status':<11} {'section':<24} checks or exclusion"]
    for r in rows:
        lines.append(f"{r.id:<14} {r.level:<10} {r.source:<9} {r.status:<11} {r.section:<24} {_shorten(r.detail)}")
    lines += ["", _summary_text(summary(rows))]
    return "\n".join(lines)


def _summary_text(s: dict[str, Any]) -> str:
    lines = [f"{'level':<10} {'tested':>7} {'excluded':>9} {'uncovered':>10}"]
    for level, counts in s["per_level"].items():
        lines.append(f"{level:<10} {counts['tested']:>7} {counts['excluded']:>9} {counts['uncovered']:>10}")
    unverified = ", ".join(f"{u['id']} ({u['level']})" for u in s["unverified"]) or "none"
    lines.append(f"unverified, not scored: {unverified}")
    lines.append("established MUST / MUST NOT by source: "
                 + ", ".join(f"{source} {n}" for source, n in sorted(s["musts_per_source"].items())))
    lines.append(f"uncovered MUST / MUST NOT: {len(s['uncovered_musts'])}")
    return "\n".join(lines)


def render_markdown(rows: Sequence[Row]) -> str:
    def cell(text: str) -> str:
        return text.replace("|", "\\|")

    lines = ["| id | level | source | status | section | checks or exclusion |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.id} | {r.level} | {r.source} | {r.status} | {cell(r.section)} | {cell(r.detail)} |" for r in rows]
    s = summary(rows)
    lines += ["", "| level | tested | excluded | uncovered |", "|---|---:|---:|---:|"]
    lines += [f"| {lvl} | {c['tested']} | {c['excluded']} | {c['uncovered']} |" for lvl, c in s["per_level"].items()]
    unverified = ", ".join(f"{u['id']} ({u['level']})" for u in s["unverified"]) or "none"
    lines += [
        "",
        f"Unverified, not scored: {unverified}.",
        "",
        f"Uncovered MUST / MUST NOT: {len(s['uncovered_musts'])}.",
    ]
    return "\n".join(lines)


def render_json(rows: Sequence[Row]) -> str:
    matrix = [
        {
            "id": r.id,
            "level": r.level,
            "status": r.status,
            "source": r.source,
            "section": r.section,
            "coverage": r.coverage,
            "checks": list(r.checks),
            "exclusion": r.exclusion,
        }
        for r in rows
    ]
    return json.dumps({"requirements": matrix, "summary": summary(rows)}, indent=2, ensure_ascii=False)


RENDERERS = {"text": render_text, "json": render_json, "markdown": render_markdown}


# -- pinning ---------------------------------------------------------------


def read_pin(path: Path) -> list[str]:
    ids = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].strip()
        if entry:
            ids.append(entry)
    return ids


def compare_with_pin(rows: Sequence[Row], pin: Path) -> int:
    current, pinned = set(uncovered_musts(rows)), set(read_pin(pin))
    added, removed = sorted(current - pinned), sorted(pinned - current)
    if not added and not removed:
        print(f"{pin}: matches the {len(current)} uncovered MUST / MUST NOT requirements.")
        return 0
    for rid in added:
        print(f"added (uncovered, not pinned): {rid}")
    for rid in removed:
        print(f"removed (pinned, no longer uncovered): {rid}")
    return 1


# -- entry point -----------------------------------------------------------


def main(argv: Sequence[str] | None = None, *, catalog: Mapping[str, Any] | None = None) -> int:
    """Print the matrix (or compare with a pin); ``catalog`` replaces the shipped one in tests."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--format", choices=sorted(RENDERERS), default="text")
    parser.add_argument("--pin", type=Path, metavar="FILE", help="compare the uncovered MUST list with FILE")
    args = parser.parse_args(argv)

    if catalog is None:
        from engram_mcp.contract import load

        catalog = load().requirements
    rows = rows_of(catalog)

    if args.pin is not None:
        return compare_with_pin(rows, args.pin)
    print(RENDERERS[args.format](rows))
    return 1 if uncovered_musts(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
