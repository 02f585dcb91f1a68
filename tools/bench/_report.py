"""What a run found: rows for the table, raw samples and facts for the JSON file."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engram_mcp.reference._sqlite import sqlite3
from tools.bench._stats import ratio, summary_ms


@dataclass
class Report:
    config: dict[str, Any]
    rows: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)  # measure -> case -> samples (seconds) or figures
    skipped: dict[str, str] = field(default_factory=dict)  # "measure/part" -> why
    facts: dict[str, Any] = field(default_factory=dict)  # non-latency results (race effects, build times)

    def latency(self, measure: str, case: str, samples: list[float], *, anchor: str | None = None,
                target: str = "", limit_ms: float | None = None, ratio_limit: float | None = None) -> dict[str, Any]:
        """A latency row; ``anchor`` names a case of the same measure already added (its ratio is printed)."""
        row: dict[str, Any] = {"measure": measure, "case": case, **summary_ms(samples), "target": target}
        self.raw.setdefault(measure, {})[case] = samples
        if anchor is not None:
            base = next(r for r in self.rows if r["measure"] == measure and r["case"] == anchor)
            row.update(anchor=anchor, ratio_p50=ratio(row["p50_ms"], base["p50_ms"]),
                       ratio_p99=ratio(row["p99_ms"], base["p99_ms"]))
            if ratio_limit is not None and row["ratio_p50"] is not None:
                row["meets"] = row["ratio_p50"] <= ratio_limit
        if limit_ms is not None:
            row["meets"] = row["p99_ms"] <= limit_ms
        self.rows.append(row)
        return row

    def rate(self, measure: str, case: str, count: int, seconds: float, *, target: str = "",
             floor: float | None = None) -> dict[str, Any]:
        per_second = count / seconds if seconds > 0 else 0.0
        row: dict[str, Any] = {"measure": measure, "case": case, "n": count, "seconds": seconds,
                               "per_second": per_second, "target": target}
        if floor is not None:
            row["meets"] = per_second >= floor
        self.raw.setdefault(measure, {})[case] = {"count": count, "seconds": seconds}
        self.rows.append(row)
        return row

    def value(self, measure: str, case: str, figures: dict[str, Any], *, target: str = "",
              meets: bool | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {"measure": measure, "case": case, **figures, "target": target}
        if meets is not None:
            row["meets"] = meets
        self.raw.setdefault(measure, {})[case] = figures
        self.rows.append(row)
        return row

    def skip(self, part: str, reason: str) -> None:
        self.skipped[part] = reason
        print(f"{part}: skipped: {reason}", flush=True)

    def to_json(self) -> dict[str, Any]:
        return {"config": self.config, "machine": machine_facts(), "rows": self.rows, "raw": self.raw,
                "facts": self.facts, "skipped": self.skipped}

    def write(self, path: Path) -> None:
        path.write_text(json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8")


def machine_facts() -> dict[str, Any]:
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        rev = ""
    return {"cpu_count": os.cpu_count(), "python": sys.version.split()[0],
            "implementation": platform.python_implementation(), "platform": platform.platform(),
            "sqlite": sqlite3.sqlite_version, "git_rev": rev or None}  # sqlite: the build the store runs on


def _number(value: Any, digits: int = 2) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}" if isinstance(value, int) else str(value)


TITLE = "engram reference benchmarks (ratio: p50 and p99 over the anchor case; noop_ratio_p50: over the SDK no-op)"
COLUMNS = ("measure", "case", "p50_ms", "p99_ms", "n", "per_second", "ratio_p50", "ratio_p99", "noop_ratio_p50",
           "value", "target", "meets")


def print_rows(rows: list[dict[str, Any]]) -> None:
    """One line per row as each measure ends, so a long run shows its figures before the final table."""
    for row in rows:
        shown = [f"{column}={_number(row[column])}" for column in COLUMNS[2:] if row.get(column) is not None]
        print(f"  {row['case']}: " + "  ".join(shown), flush=True)


def print_table(report: Report) -> None:
    rows = [[_number(row.get(column)) for column in COLUMNS] for row in report.rows]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text when rich is missing
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(COLUMNS)]
        print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)))
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)))
    else:
        table = Table(title=TITLE)
        for column in COLUMNS:
            table.add_column(column, justify="left" if column in {"measure", "case", "target"} else "right")
        for r in rows:
            table.add_row(*r)
        Console(width=200).print(table)
    for part, reason in report.skipped.items():
        print(f"skipped {part}: {reason}")
