"""Command line of conformance."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("conformance: the conformance harness is not available yet in this release.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
