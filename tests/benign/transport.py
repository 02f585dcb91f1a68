"""Benign variants: transport. MCP's stdio transport lets a server write anything on stderr; stdout stays MCP's."""

from __future__ import annotations

import sys
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from tests.benign.catalog import variant
from tests.variant_server import ListHandler, Seams


async def _logged(request: ServerRequestContext, params: types.CallToolRequestParams) -> types.CallToolRequestParams:
    print(f"tools/call {params.name}", file=sys.stderr, flush=True)
    return params


@variant("logs-on-stderr", freedom="MCP's stdio transport lets a server write anything on stderr; stdout is MCP's")
def logs_on_stderr(seams: Seams) -> None:
    """A banner at start and a log line for every tools/call, all on stderr."""
    print("Engram memory server starting (logs on stderr)", file=sys.stderr, flush=True)
    seams.before.append(_logged)


PAGE = 2  # tools a page of tools/list holds


@variant("tools-list-paged", freedom="MCP lets a server page tools/list with nextCursor (cursor-based pagination); "
         "the contract asks only that each principal discovers its granted tools, whatever the pages")
def tools_list_paged(seams: Seams) -> None:
    """tools/list comes in pages of two tools, each but the last with a nextCursor naming where the next begins."""

    async def paged(request: ServerRequestContext, params: Any, handler: ListHandler) -> types.ListToolsResult:
        listed = await handler(request, params)
        cursor = getattr(params, "cursor", None) if params is not None else None
        start = int(cursor.removeprefix("page-from-")) if isinstance(cursor, str) and cursor.startswith(
            "page-from-") and cursor.removeprefix("page-from-").isdigit() else 0
        end = start + PAGE
        more = f"page-from-{end}" if end < len(listed.tools) else None
        return listed.model_copy(update={"tools": listed.tools[start:end], "next_cursor": more})

    seams.list_around.append(paged)
