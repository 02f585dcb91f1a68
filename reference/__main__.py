"""``python -m engram_mcp.reference``: the ``engram-reference`` command."""

from engram_mcp.reference._cli import main

if __name__ == "__main__":
    raise SystemExit(main())
