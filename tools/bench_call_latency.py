"""Print tool-call latency over stdio: the reference server next to the SDK's own no-op tool.

    python tools/bench_call_latency.py [--calls N]

A benchmark, not a test: it prints figures (p50, p99 in milliseconds) and
asserts nothing. Both servers run as real subprocesses over stdio, in the
legacy era, driven by the harness's own connection.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import textwrap
from pathlib import Path

from engram_mcp.conformance._connect import Connection, parse_target
from engram_mcp.conformance._host import ElicitationConfirmer, SignedMetaBinding
from engram_mcp.conformance._profile import load_profile
from engram_mcp.conformance._world import capture_arguments
from engram_mcp.reference._init import write_configuration

NOOP_SERVER = textwrap.dedent('''
    import anyio, mcp_types as types
    from mcp.server import Server
    from mcp.server.stdio import stdio_server

    async def list_tools(ctx, params):
        return types.ListToolsResult(tools=[types.Tool(name="noop", input_schema={"type": "object"})])

    async def call_tool(ctx, params):
        return types.CallToolResult(content=[types.TextContent(type="text", text="{}")], structured_content={})

    server = Server("noop", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main():
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)
''')


def figures(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{name:<34} p50 {statistics.median(ordered) * 1000:6.2f} ms   p99 {p99 * 1000:6.2f} ms   n={len(ordered)}"


def measure(conn: Connection, tool: str, arguments: dict, meta: dict | None, calls: int) -> list[float]:
    for _ in range(20):  # warm up
        conn.call(tool, arguments, meta)
    return [conn.call(tool, arguments, meta).elapsed for _ in range(calls)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        noop = Path(scratch) / "noop.py"
        noop.write_text(NOOP_SERVER, encoding="utf-8")
        base = Connection(parse_target(f"stdio:{sys.executable} {noop}"), "legacy", ElicitationConfirmer())
        base.open()
        print(figures("SDK no-op tool", measure(base, "noop", {}, None, args.calls)))
        base.close()

        write_configuration(Path(scratch) / "ref", seed="bench")
        profile = load_profile(Path(scratch) / "ref" / "conformance-profile.toml")
        host = SignedMetaBinding.from_profile(profile)
        config = Path(scratch) / "ref" / "server.toml"
        command = f"stdio:{sys.executable} -m engram_mcp.reference._cli serve --config {config}"
        conn = Connection(parse_target(command), "legacy", ElicitationConfirmer())
        conn.open()
        scope = profile.primary
        principal = scope.principal_with({"engram_memory_get", "engram_memory_search"}) if scope else None
        assert scope is not None and principal is not None, "the reference's profile has a primary scope"
        meta = host.meta(scope, principal)
        purpose = profile.purpose_ref
        unknown = {"record_id": "mem_" + "a" * 52, "purpose_ref": purpose}
        print(figures("reference get (NOT_FOUND)", measure(conn, "engram_memory_get", unknown, meta, args.calls)))
        captured = conn.call(
            "engram_memory_capture", capture_arguments(purpose, text="ledger benchmark record"), meta
        ).value
        admitted = conn.call(
            "engram_memory_request_admission",
            {"candidate_id": captured["candidate_id"], "idempotency_key": "bench-admission-0001"},
            meta,
        ).value
        found = {"record_id": admitted["outcome"]["record_id"], "purpose_ref": purpose}
        print(figures("reference get (a record)", measure(conn, "engram_memory_get", found, meta, args.calls)))
        query = {"query": "ledger benchmark", "purpose_ref": purpose}
        print(figures("reference search (1 record)", measure(conn, "engram_memory_search", query, meta, args.calls)))
        conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
