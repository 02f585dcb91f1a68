"""Benign variants: identity and presentation. Each server presents the same behaviour in its own way: the order of
tools/list, its name and version, the wording of titles and descriptions, how the text copy is formatted, extra
``_meta``, a clock a little behind the host's, and the latency of a busy host.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.contract.binding import deadline_passed
from engram_mcp.reference._envelope import tool_result
from engram_mcp.reference.server import CallContext, DeadlineStage
from tests.benign.catalog import variant
from tests.variant_server import ListHandler, Params, Seams, VariantServer


@variant("reversed-tool-order", freedom="tools/list is a set of tools; the contract fixes no order")
def reversed_tool_order(seams: Seams) -> None:
    """tools/list names the granted tools in reverse order."""
    seams.list_rewrites.append(
        lambda request, result: result.model_copy(update={"tools": list(reversed(result.tools))}))


def _acme_identity(server: VariantServer) -> None:
    sdk = server.server
    sdk.name, sdk.version, sdk.title = "acme-memory", "7.3.1-rc.2", "Acme durable memory"
    sdk.instructions = "Search before you capture; cite what you use."


@variant("other-server-identity", freedom="serverInfo is the implementation's own")
def other_server_identity(seams: Seams) -> None:
    """serverInfo says another name, version and title, and the server gives instructions."""
    seams.finish.append(_acme_identity)


def _acme_titles(name: str, tool: types.Tool) -> types.Tool:
    short = name.removeprefix("engram_memory_").replace("_", " ")
    return tool.model_copy(update={"title": f"Memory: {short}", "description": f"Acme memory, {short} operation.",
                                   "annotations": None})


@variant(
    "other-titles-and-annotations", freedom="titles, descriptions and annotations are hints the contract leaves open"
)
def other_titles_and_annotations(seams: Seams) -> None:
    """Tools carry other titles and descriptions, and no annotations at all."""
    seams.retool(_acme_titles)


def _reordered(node: Any) -> Any:
    """The same JSON value with every object's members in reverse order."""
    if isinstance(node, dict):
        return {key: _reordered(node[key]) for key in reversed(list(node))}
    if isinstance(node, list):
        return [_reordered(item) for item in node]
    return node


def _pretty(envelope: dict[str, Any]) -> types.CallToolResult:
    text = json.dumps(envelope, indent=2, sort_keys=True, ensure_ascii=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)],
                                structured_content=_reordered(envelope), is_error=not envelope["ok"])


@variant("pretty-text-copy", freedom="EMC-ENV-001 asks for the same JSON value, not the same bytes")
def pretty_text_copy(seams: Seams) -> None:
    """The text copy is indented, ASCII-escaped and key-sorted; structuredContent lists members in reverse order."""
    seams.render = _pretty


class _ClockBehind:
    """Deadlines judged at every stage on a clock ``lag`` seconds behind the host's."""

    def __init__(self, lag: float) -> None:
        self.lag = lag

    def passed(self, call: CallContext, stage: DeadlineStage) -> bool:
        return deadline_passed(call.binding, time.time() - self.lag)


@variant(
    "deadline-clock-behind",
    freedom="a server judges a deadline on its own clock, within binding.clock_skew of the host's",
)
def deadline_clock_behind(seams: Seams) -> None:
    """The server's clock runs one second behind the host's when it judges deadlines."""
    seams.port("deadlines", lambda deadlines: _ClockBehind(1.0))


@variant("result-meta", freedom="MCP lets any result carry _meta; the envelope itself stays exact")
def result_meta(seams: Seams) -> None:
    """Every tools/call and tools/list result carries an extra _meta member."""
    counter = iter(range(1, 1 << 62))

    def render(envelope: dict[str, Any]) -> types.CallToolResult:
        meta = {"com.example.memory/served-by": "node-3", "com.example.memory/sequence": next(counter)}
        return tool_result(envelope).model_copy(update={"meta": meta})

    seams.render = render
    seams.list_rewrites.append(
        lambda request, result: result.model_copy(update={"meta": {"com.example.memory/catalog": "v2"}}))


@variant("timing-jitter", freedom="latency is not part of the contract; noise must not read as a leak")
def timing_jitter(seams: Seams) -> None:
    """Every tools/call and tools/list waits a random 0 to 15 ms first (a busy host)."""
    rng = random.SystemRandom()

    async def wait() -> None:
        await anyio.sleep(rng.uniform(0.0, 0.015))

    async def call_wait(request: ServerRequestContext, params: Params) -> Params:
        await wait()
        return params

    async def list_wait(request: ServerRequestContext, params: Any, handler: ListHandler) -> types.ListToolsResult:
        await wait()
        return await handler(request, params)

    seams.before.append(call_wait)
    seams.list_around.append(list_wait)
