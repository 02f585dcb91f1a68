"""A server in the making: the reference behind a filter that lists and serves only some of the six tools.

    python tests/partial_server.py --config SERVER_TOML --tools search,get [--unknown-as-result]

What an implementer has on the way to six tools: every other tool is unknown to it, for every caller (listed
to no one, and a bound call of it is the unknown-tool error, after the binding has been judged, as the host
profile orders the checks). ``--unknown-as-result`` answers such a call as some SDKs' tool registries do, with a
tool result (isError true, "MCP error -32602: Tool … not found") instead of the JSON-RPC error. The readiness
tests (tests/conformance/test_readiness.py) judge it with a profile that grants what it serves, and with none.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: the repository's root makes `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.contract import load
from engram_mcp.reference._server import protocol_error
from engram_mcp.reference.server import load_config, run_stdio
from tests.variant_server import Seams

UNKNOWN_TOOL = load().protocol_errors["unknown_tool"]


def partial(seams: Seams, served: frozenset[str], *, unknown_as_result: bool = False) -> None:
    """Record on ``seams`` a server that has only the ``served`` tools."""

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        if params.name in served or seams.server.trusted_binding(request) is None:
            return None  # a served tool, or an unbound call, which the reference refuses first
        if unknown_as_result:
            text = f"MCP error {UNKNOWN_TOOL.jsonrpc_code}: Tool {params.name} not found"
            return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
        raise protocol_error(UNKNOWN_TOOL)

    def listed(request: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        return result.model_copy(update={"tools": [tool for tool in result.tools if tool.name in served]})

    seams.intercept.append(intercept)
    seams.list_rewrites.append(listed)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve the reference with only some of its tools, over stdio.")
    parser.add_argument("--config", type=Path, required=True, help="the server.toml of an engram-reference init")
    parser.add_argument("--tools", required=True, help="the tools served, comma-separated (search,get)")
    parser.add_argument("--unknown-as-result", action="store_true",
                        help="answer a tool it does not have with an isError tool result, not the JSON-RPC error")
    args = parser.parse_args(argv)
    served = frozenset("engram_memory_" + name.strip().removeprefix("engram_memory_") for name in args.tools.split(","))
    unknown = sorted(served - set(load().tools))
    if unknown:
        parser.error(f"not tools of the contract: {', '.join(unknown)}")
    seams = Seams(load_config(args.config))
    partial(seams, served, unknown_as_result=args.unknown_as_result)
    with contextlib.suppress(KeyboardInterrupt):
        run_stdio(seams.build())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
