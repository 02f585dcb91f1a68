"""Write the suite's check ids into the catalog's "checks" column.

The suite's @check markers are the truth about which check covers which
requirement; this tool copies them into spec/requirements.json so that the
catalog, `conformance list` and tools/traceability.py agree. With --check it
only reports whether the catalog is in sync (exit 1 if not).

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


def synced_catalog() -> dict:
    covering: dict[str, list[str]] = defaultdict(list)
    for check_id, requirements in suite_checks().items():
        for requirement in requirements:
            covering[requirement].append(check_id)
    catalog = load().requirements
    for entry in catalog["requirements"]:
        entry["checks"] = sorted(covering.get(entry["id"], []))
    return catalog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift instead of writing")
    args = parser.parse_args(argv)
    text = json.dumps(synced_catalog(), indent=2, ensure_ascii=False) + "\n"
    if args.check:
        if CATALOG.read_text(encoding="utf-8") != text:
            print(
                "spec/requirements.json: the checks column is out of date; run python tools/sync_checks.py",
                file=sys.stderr,
            )
            return 1
        return 0
    CATALOG.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
