"""MCP's own transport rules, which any host relies on before the first tool is called."""

from __future__ import annotations

from engram_mcp.conformance._checks import check, not_applicable, require
from engram_mcp.conformance._raw import RawSession
from engram_mcp.conformance._run import Run, as_era
from engram_mcp.conformance._world import World

SHOWN = 3  # noise lines quoted in the verdict's detail


@check("transport.stdout-only-mcp", "EMC-HP-073")
def test_stdout_carries_only_mcp_messages(world: World, harness: Run) -> None:
    """Over stdio the target writes nothing on stdout but JSON-RPC messages, from start to exit (stderr is free)."""
    if harness.target.kind != "stdio":
        not_applicable("the target is not served over stdio")
    # A process of its own, from its first byte: a banner is written before any session the run shares exists.
    session = RawSession(harness.target, as_era(world.era), harness.timeout)
    try:
        session.open()
        reply = session.list_tools({})
    finally:
        session.close()
    world.evidence.add("stdout", {"tools/list": reply.kind, "non_mcp_lines": len(session.noise)})
    quoted = "\n".join(f"  stdout: {line[:200]!r}" for line in session.noise[:SHOWN])
    assert not session.noise, (
        f"the target wrote {len(session.noise)} line(s) on stdout that are not MCP messages, "
        f"which MCP's stdio transport forbids (log on stderr instead)\n{quoted}")
    # Silence proves nothing: the lines it would have written with its answer were never seen.
    require(reply.kind != "timeout", f"the target did not answer tools/list over a fresh stdio session "
                                     f"in the {world.era} era")
