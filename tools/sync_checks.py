"""Write the suite's check ids into the catalog's "checks" column, and the checks themselves into spec/checks.json.

The suite's @check markers are the truth about which check covers which
requirement, and what each needs to run; this tool copies them into
spec/requirements.json, so that the catalog, `conformance list` and
tools/traceability.py agree, and into spec/checks.json, which the command line
reads without importing the suite. With --check it only reports whether both
files are in sync (exit 1 if not).

    python tools/sync_checks.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from engram_mcp.conformance._catalog import suite_checks
from engram_mcp.contract import load

CATALOG = Path(__file__).resolve().parents[1] / "spec" / "requirements.json"
CHECKS = CATALOG.with_name("checks.json")


def synced_catalog() -> dict:
    covering: dict[str, list[str]] = defaultdict(list)
    for check_id, requirements in suite_checks().items():
        for requirement in requirements:
            covering[requirement].append(check_id)
    catalog = load().requirements
    for entry in catalog["requirements"]:
        entry["checks"] = sorted(covering.get(entry["id"], []))
    return catalog


def synced_checks() -> dict:
    return {"contract": load().version, **suite_checks().as_data()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    written = {CATALOG: synced_catalog(), CHECKS: synced_checks()}
    stale = []
    for path, data in written.items():
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(f"spec/{path.name}")
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print(f"{' and '.join(stale)} out of date with the suite's checks; run python tools/sync_checks.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
