"""Turn a conformance report.jsonl into GitHub workflow commands and a job summary.

    python tools/ci/annotate.py REPORT_DIR [--exit-code N]

Prints one ``::error`` per failed check, one ``::warning`` per unmet SHOULD and one
``::notice`` per pin not kept (PIN: not scored at the run's level),
each titled with the check id, era and case, and a closing ``::error`` or
``::notice`` with the run's verdict line; a run that wrote no report (a usage
error, a harness that could not start) still gets its ``::error``. Where
``GITHUB_STEP_SUMMARY`` and ``GITHUB_OUTPUT`` are set (inside GitHub Actions),
appends report.md to the job summary and writes the ``verdict`` output.
Standard library only: it runs before, or without, the package.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

# GitHub shows at most 10 error and 10 warning annotations per step; past that they are counted, not shown.
SHOWN = 10
LEVELS = {"FAIL": "error", "ERROR": "error", "XPASS": "error", "WARN": "warning", "PIN": "notice"}


def _data(text: str) -> str:
    """A workflow command's message: %, CR and LF are escaped so one command stays one line."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    """A workflow command's property value: also ':' and ',', which end a property."""
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, title: str | None = None) -> str:
    props = f" title={_property(title)}" if title else ""
    return f"::{level}{props}::{_data(message)}"


def read_report(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _title(row: dict[str, Any]) -> str:
    """check@era[case], as the console and the other reports name a check's result."""
    if row.get("label"):
        return str(row["label"])
    return f"{row['check']}@{row['era']}" + (f"[{row['case']}]" if row.get("case") else "")


def _message(row: dict[str, Any]) -> str:
    blamed = row.get("blamed") or row.get("requirements") or []
    lines = (row.get("message") or "").strip().splitlines()
    text = f"{row['status']}: {lines[0] if lines else 'no message'}"
    return text + (f" (breaks {', '.join(blamed)})" if blamed else "")


def workflow_commands(rows: Iterable[dict[str, Any]], exit_code: int | None) -> Iterator[str]:
    rows = list(rows)
    footer = next((r for r in rows if r.get("type") == "footer"), None)
    by_level: dict[str, int] = {}
    for row in rows:
        level = LEVELS.get(row.get("status", "")) if row.get("type") == "check" else None
        if level is None:
            continue
        by_level[level] = by_level.get(level, 0) + 1
        if by_level[level] <= SHOWN:
            yield command(level, _message(row), _title(row))
    for level, count in sorted(by_level.items()):
        if count > SHOWN:
            yield command(level, f"{count - SHOWN} more checks ended {level}: see report.html in the artifact")
    if footer is None:
        yield command("error", f"conformance wrote no complete report.jsonl (exit {exit_code}): see the step's log",
                      "conformance")
        return
    verdict = footer.get("verdict") or f"exit {footer.get('exit_code')}"
    yield command("notice" if footer.get("exit_code") == 0 else "error", verdict, "conformance verdict")


def _append(variable: str, text: str) -> None:
    target = os.environ.get(variable)
    if target:
        with open(target, "a", encoding="utf-8") as handle:
            handle.write(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report_dir", type=Path)
    parser.add_argument("--exit-code", type=int, help="the exit code of the conformance run")
    args = parser.parse_args(argv)
    report = args.report_dir / "report.jsonl"
    try:
        rows = read_report(report) if report.is_file() else []
    except (OSError, ValueError):
        rows = []
    footer = next((r for r in rows if r.get("type") == "footer"), {})
    if args.exit_code is not None and footer and footer.get("exit_code") != args.exit_code:
        rows = []  # an earlier run's report: this run ended before writing its own
    for line in workflow_commands(rows, args.exit_code):
        print(line)
    footer = next((r for r in rows if r.get("type") == "footer"), {})
    _append("GITHUB_OUTPUT", f"verdict={footer.get('verdict') or 'no report'}\n")
    markdown = args.report_dir / "report.md"
    if rows and markdown.is_file():
        _append("GITHUB_STEP_SUMMARY", markdown.read_text(encoding="utf-8") + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
