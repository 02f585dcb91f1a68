"""``python -m engram_mcp.conformance``: the ``conformance`` command."""

from engram_mcp.conformance._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
