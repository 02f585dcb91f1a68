"""``python -m engram_mcp.conformance._fuzz``: print the cases the checks would send."""

from __future__ import annotations

import argparse
import json
import sys

from .bases import DEFAULT_PURPOSE
from .generate import ALL_FAMILIES, cases
from .sending import shorten
from .vocabulary import TOOLS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m engram_mcp.conformance._fuzz",
        description="Print the argument cases the conformance checks would send, as JSON lines.")
    parser.add_argument("--tool", action="append", choices=TOOLS, help="only this tool (repeatable)")
    parser.add_argument("--family", action="append", choices=ALL_FAMILIES, help="only this family (repeatable)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--examples", type=int, default=25)
    parser.add_argument("--purpose", default=DEFAULT_PURPOSE, help="the purpose the host binds")
    parser.add_argument("--full", action="store_true", help="print arguments in full (Case.from_json reads them back)")
    args = parser.parse_args(argv)
    for family in args.family or ALL_FAMILIES:
        for tool in args.tool or TOOLS:
            for case in cases(family, tool, seed=args.seed, examples=args.examples, purpose=args.purpose):
                record = case.as_json()
                if not args.full:
                    record["arguments"] = shorten(case.arguments)
                sys.stdout.write(json.dumps(record, ensure_ascii=True, default=repr) + "\n")
    sys.stdout.flush()
    return 0
