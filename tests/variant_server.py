"""A reference server changed only through the seams it offers: the base of the faulty and benign catalogs.

A variant never assigns to the server's members. It records its changes on a ``Seams`` before the
server exists, and ``Seams.build`` makes the server from them:

- the configuration (``seams.config``, replaced whole: keys trusted more widely, another TTL);
- the server's ports (``seams.port("gates", change)``: the host binding, grants, gates, argument
  oracle, deadlines, each scope's policy; each ``change`` gets the default port and returns the one to use);
- the classes of the engine's parts (``seams.override("recall", "ranked", make)``, or
  ``seams.wrap_operation(tool, make)`` for one of the six operations): a subclass whose method is
  ``make(the inherited method)``; building fails at once when the method does not exist any more;
- hooks at the MCP edge (``VariantServer``): parameters rewritten before the reference sees a
  call, answers given instead of it, envelopes rewritten after it, the call step ``serve`` wrapped,
  tools/list rewritten, results rendered differently, the messages a stdio session reads watched,
  the HTTP bearer guard replaced.

Each recorded change is named in ``Seams.changes``; tests/test_variant_catalogs.py builds every
variant of both catalogs and checks that each change reaches the server it built.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.reference._envelope import tool_result
from engram_mcp.reference._lifecycle import Lifecycle
from engram_mcp.reference._recall import Recall
from engram_mcp.reference._search import CursorSealer
from engram_mcp.reference.server import (
    BearerGuard,
    CallContext,
    Engine,
    ReferenceServer,
    ServerConfig,
    ServerPorts,
    build_ports,
)

Params = types.CallToolRequestParams
Served = Any  # an Outcome, or the modern era's request for input
# Parameters rewritten (or just waited on) before the reference sees the call.
Before = Callable[[ServerRequestContext, Params], Awaitable[Params]]
# An answer given instead of the reference's: an envelope (rewritten and rendered like the reference's), a finished
# result (sent as it is), or None to let the reference answer.
Intercept = Callable[[ServerRequestContext, Params], Awaitable["dict[str, Any] | types.CallToolResult | None"]]
After = Callable[[ServerRequestContext, Params, dict[str, Any]], Awaitable[dict[str, Any]]]
Rewrite = Callable[[ServerRequestContext, Params, dict[str, Any]], dict[str, Any]]
ListRewrite = Callable[[ServerRequestContext, types.ListToolsResult], types.ListToolsResult]
# A wrapper of the call step: ``around(call, serve)`` may change the call, refuse it, or shield it.
Around = Callable[[CallContext, Callable[[CallContext], Awaitable[Served]]], Awaitable[Served]]
ListHandler = Callable[[ServerRequestContext, Any], Awaitable[types.ListToolsResult]]
ListAround = Callable[[ServerRequestContext, Any, ListHandler], Awaitable[types.ListToolsResult]]
# Shown each message a stdio session reads, with the stream the server writes to.
ReadWatch = Callable[[Any, Any], Awaitable[None]]

ENGINE_PARTS = ("engine", "recall", "lifecycle", "cursors")
_PART_BASES: dict[str, type] = {"engine": Engine, "recall": Recall, "lifecycle": Lifecycle, "cursors": CursorSealer}
# Where each operation lives, and whether it is handed the call's unit-of-work hooks (the mutations).
OPERATIONS: dict[str, tuple[str, str, bool]] = {
    "engram_memory_search": ("recall", "search", False),
    "engram_memory_get": ("recall", "get", False),
    "engram_memory_capture": ("lifecycle", "capture", True),
    "engram_memory_request_admission": ("lifecycle", "request_admission", True),
    "engram_memory_withdraw": ("lifecycle", "withdraw", True),
    "engram_memory_forget": ("lifecycle", "forget", True),
}
PORTS = tuple(f.name for f in dataclasses.fields(ServerPorts) if f.name not in ("store", "cipher"))


class SeamMissing(AssertionError):
    """A variant asks for a seam the reference no longer offers: the catalog must follow the reference."""


def _overriding(base: type, method: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> type:
    """A subclass of ``base`` whose ``method`` is ``make(the inherited method, bound)``."""
    if not callable(getattr(base, method, None)):
        raise SeamMissing(f"{base.__name__} has no method {method!r} to override")

    def overridden(self: Any, *args: Any, **kwargs: Any) -> Any:
        return make(getattr(super(subclass, self), method))(*args, **kwargs)

    subclass = type(f"{base.__name__}_{method}", (base,), {method: overridden, "__module__": __name__})
    return subclass


@dataclass
class Seams:
    """The changes a variant makes, recorded before the server is built (see the module's docstring)."""

    config: ServerConfig
    before: list[Before] = field(default_factory=list)
    intercept: list[Intercept] = field(default_factory=list)
    after: list[After] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    list_rewrites: list[ListRewrite] = field(default_factory=list)
    around: list[Around] = field(default_factory=list)
    list_around: list[ListAround] = field(default_factory=list)
    render: Callable[[dict[str, Any]], types.CallToolResult] | None = None
    read_watch: ReadWatch | None = None
    bearer_guard: Callable[[Any, str], Any] = BearerGuard
    tool_changes: list[Callable[[str, types.Tool], types.Tool]] = field(default_factory=list)
    finish: list[Callable[[VariantServer], None]] = field(default_factory=list)  # public members after the build
    port_changes: list[tuple[str, Callable[[Any], Any]]] = field(default_factory=list)
    part_classes: dict[str, type] = field(default_factory=dict)
    configured: bool = False  # the configuration was replaced
    built: VariantServer | None = None

    # -- recording -----------------------------------------------------------------------------------

    def reconfigure(self, **changes: Any) -> None:
        """Replace members of the configuration (before any port is built from it)."""
        self.config = dataclasses.replace(self.config, **changes)
        self.configured = True

    def port(self, name: str, change: Callable[[Any], Any]) -> None:
        """Use ``change(default port)`` as the server's ``name`` port."""
        if name not in PORTS:
            raise SeamMissing(f"the server has no port {name!r} (it has {', '.join(PORTS)})")
        self.port_changes.append((name, change))

    def override(self, part: str, method: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """The engine's ``part`` gets a subclass whose ``method`` is ``make(inherited method)``."""
        if part not in ENGINE_PARTS:
            raise SeamMissing(f"the engine has no part {part!r} (it has {', '.join(ENGINE_PARTS)})")
        base = self.part_classes.get(part, _PART_BASES[part])
        self.part_classes[part] = _overriding(base, method, make)

    def wrap_operation(self, tool: str, make: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        """Wrap one operation: ``make(operation)`` gets and returns ``(caller, arguments, now) -> value``; a
        mutation's unit-of-work hooks travel past the wrapper unchanged."""
        part, method, mutation = OPERATIONS[tool]
        if not mutation:
            self.override(part, method, make)
            return

        def with_hooks(inherited: Callable[..., Any]) -> Callable[..., Any]:
            def operation(caller: Any, arguments: Any, now: Any, hooks: Any = None) -> Any:
                return make(lambda c, a, n: inherited(c, a, n, hooks))(caller, arguments, now)

            return operation

        self.override(part, method, with_hooks)

    def retool(self, change: Callable[[str, types.Tool], types.Tool]) -> None:
        """Advertise ``change(name, tool)`` instead of each tool."""
        self.tool_changes.append(change)

    @property
    def changes(self) -> list[str]:
        """What the variant changed, one name a seam."""
        hooks = ("before", "intercept", "after", "rewrites", "list_rewrites", "around", "list_around",
                 "tool_changes", "finish")
        named = [f"hook:{name}" for name in hooks if getattr(self, name)]
        named += [f"port:{name}" for name, _ in self.port_changes]
        named += [f"part:{part}" for part in self.part_classes]
        named += ["hook:render"] * (self.render is not None) + ["hook:read_watch"] * (self.read_watch is not None)
        named += ["http:bearer_guard"] * (self.bearer_guard is not BearerGuard) + ["config"] * self.configured
        return named

    # -- building ------------------------------------------------------------------------------------

    @property
    def server(self) -> VariantServer:
        """The server built from these seams (for hooks that read it while serving)."""
        if self.built is None:
            raise RuntimeError("the server is read before it was built")
        return self.built

    def ports(self) -> ServerPorts:
        ports = build_ports(self.config)
        for name, change in self.port_changes:
            ports = dataclasses.replace(ports, **{name: change(getattr(ports, name))})
        parts = {part: cls for part, cls in self.part_classes.items() if part != "engine"}
        engine = self.part_classes.get("engine", Engine)
        return dataclasses.replace(ports, engine=partial(engine, **parts) if parts else engine)

    def build(self) -> VariantServer:
        self.built = VariantServer(self.config, self.ports(), self)
        for name in list(self.built.tools):
            for change in self.tool_changes:
                self.built.tools[name] = change(name, self.built.tools[name])
        for step in self.finish:
            step(self.built)
        return self.built


class VariantServer(ReferenceServer):
    """The reference server with the edge hooks of its ``Seams``; with none recorded it serves as the reference."""

    def __init__(self, config: ServerConfig, ports: ServerPorts, seams: Seams) -> None:
        super().__init__(config, ports)
        self.seams = seams

    async def call_tool(self, request: ServerRequestContext, params: Params) -> Any:
        seams = self.seams
        for step in seams.before:
            params = await step(request, params)
        for answer in seams.intercept:
            early = await answer(request, params)
            if isinstance(early, types.CallToolResult):
                return early
            if early is not None:
                return self._finished(request, params, early)
        result = await super().call_tool(request, params)
        if not isinstance(result, types.CallToolResult) or not (seams.after or seams.rewrites or seams.render):
            return result
        envelope = copy.deepcopy(result.structured_content) or {}
        for step_after in seams.after:
            envelope = await step_after(request, params, envelope)
        return self._finished(request, params, envelope)

    def _finished(self, request: ServerRequestContext, params: Params, envelope: dict[str, Any]) -> Any:
        for rewrite in self.seams.rewrites:
            envelope = rewrite(request, params, envelope)
        return (self.seams.render or tool_result)(envelope)

    async def serve(self, call: CallContext) -> Served:
        step: Step = super().serve
        for wrapper in reversed(self.seams.around):
            step = _wrapped(wrapper, step)
        return await step(call)

    async def list_tools(self, request: ServerRequestContext, params: Any) -> types.ListToolsResult:
        handler: ListHandler = super().list_tools
        for wrapper in reversed(self.seams.list_around):
            handler = _wrapped_list(wrapper, handler)
        result = await handler(request, params)
        for rewrite in self.seams.list_rewrites:
            result = rewrite(request, result)
        return result

    async def run(self, read: Any, write: Any) -> None:
        watch = self.seams.read_watch
        if watch is None:
            await super().run(read, write)
            return

        async def seen(message: Any) -> None:
            await watch(message, write)

        await super().run(_ReadWatch(read, seen), write)


Step = Callable[[CallContext], Awaitable[Served]]


def _wrapped(wrapper: Around, step: Step) -> Step:
    async def wrapped(call: CallContext) -> Served:
        return await wrapper(call, step)

    return wrapped


def _wrapped_list(wrapper: ListAround, handler: ListHandler) -> ListHandler:
    async def wrapped(request: ServerRequestContext, params: Any) -> types.ListToolsResult:
        return await wrapper(request, params, handler)

    return wrapped


class _ReadWatch:
    """A server's read stream that shows each message to ``seen`` before the server gets it."""

    def __init__(self, inner: Any, seen: Callable[[Any], Awaitable[None]]) -> None:
        self._inner, self._seen = inner, seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def __aenter__(self) -> _ReadWatch:
        await self._inner.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._inner.__aexit__(*exc)

    def __aiter__(self) -> _ReadWatch:
        return self

    async def __anext__(self) -> Any:
        item = await self._inner.__anext__()
        await self._seen(item)
        return item

    async def receive(self) -> Any:
        item = await self._inner.receive()
        await self._seen(item)
        return item
