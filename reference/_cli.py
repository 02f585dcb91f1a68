"""Command line of engram-reference."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("engram-reference: the reference server is not available yet in this release.", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
