"""Benign variants: transport. MCP's stdio transport lets a server write anything on stderr; stdout stays MCP's."""

from __future__ import annotations

import sys

import mcp_types as types
from mcp.server import ServerRequestContext

from tests.benign.catalog import variant
from tests.variant_server import Seams


async def _logged(request: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolRequestParams:
    print(f"tools/call {params.name}", file=sys.stderr, flush=True)
    return params


@variant("logs-on-stderr", freedom="MCP's stdio transport lets a server write anything on stderr; stdout is MCP's")
def logs_on_stderr(seams: Seams) -> None:
    """A banner at start and a log line for every tools/call, all on stderr."""
    print("Engram memory server starting (logs on stderr)", file=sys.stderr, flush=True)
    seams.before.append(_logged)
