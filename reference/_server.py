"""The MCP edge: host binding, grants, validation, confirmation gates, envelopes.

Built on the SDK's low-level Server, which hands arguments through untouched,
so closed schemas are enforced here by the shared oracle. Both protocol eras
are served; the client's first request picks one. Nothing from a request's
input or from an exception ever reaches the client: refusals are the error
table's constant envelopes, or the two constant JSON-RPC errors.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any, NoReturn

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from engram_mcp.contract import load
from engram_mcp.contract.binding import (
    HOST_BINDING_META_KEY,
    Binding,
    BindingRejected,
    approval_too_old,
    confirmation_required,
)
from engram_mcp.reference._audit import AuditJournal
from engram_mcp.reference._call import CallContext, CancelProbe, unforeseen
from engram_mcp.reference._config import ServerConfig
from engram_mcp.reference._envelope import Outcome, envelope, tool_result
from engram_mcp.reference._gates import Approval, GateCall
from engram_mcp.reference._journal import scope_of
from engram_mcp.reference._precheck import ItemCounts
from engram_mcp.reference._wiring import ServerPorts, build_ports

log = logging.getLogger("engram_mcp.reference")

SERVER_NAME = "engram-reference"
_CONTRACT = load()
_UNKNOWN_TOOL = _CONTRACT.protocol_errors["unknown_tool"]
_UNTRUSTED = _CONTRACT.protocol_errors["trusted_context_unavailable"]


def protocol_error(error: Any) -> MCPError:
    return MCPError(code=error.jsonrpc_code, message=error.message)


def _purpose(tool: str, arguments: Mapping[str, Any]) -> str | None:
    if tool == "engram_memory_capture":
        return arguments["payload"]["purpose_ref"]
    return arguments.get("purpose_ref")


def _annotations(tool: str) -> types.ToolAnnotations:
    spec = _CONTRACT.tools[tool]
    return types.ToolAnnotations(
        title=spec.title,
        read_only_hint=spec.mutability == "read-only",
        destructive_hint=spec.confirmation == "always",
        idempotent_hint=spec.idempotent,
        open_world_hint=False,
    )


def _advertised(tool: str) -> types.Tool:
    spec = _CONTRACT.tools[tool]
    return types.Tool(
        name=tool,
        title=spec.title,
        description=spec.description,
        input_schema=_CONTRACT.advertised_input_schema(tool),
        output_schema=_CONTRACT.advertised_output_schema(tool),
        annotations=_annotations(tool),
    )


def _integral(value: Any) -> Any:
    """Whole numbers as ints: JSON has one number type, and 10.0 is the integer 10 (EMC-ENC-012)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def _journal_id(binding: Binding) -> str:
    """The journal's id of a call: the host's auditId, or, for a call refused without one, a local id
    that never reaches a client."""
    return binding.audit_id or "unnamed_" + secrets.token_hex(16)


class _ThreadCancelProbe:
    """Whether the call's task has been cancelled (a notifications/cancelled), asked from the worker thread that
    runs the call: the thread cannot be interrupted, so the mutation's last word asks once the store's lock is held."""

    def __init__(self, cancelled: type[BaseException]) -> None:
        self._cancelled = cancelled

    def is_set(self) -> bool:
        try:
            anyio.from_thread.check_cancelled()
        except self._cancelled:
            return True
        return False


async def _in_worker(call: CallContext, work: Callable[[CallContext], Outcome]) -> Outcome:
    """``work`` on a worker thread, which runs to its end; a cancellation meanwhile is raised here afterwards."""

    def on_worker(probe: CancelProbe) -> Outcome:
        call.cancelled = probe
        return work(call)

    outcome = await anyio.to_thread.run_sync(on_worker, _ThreadCancelProbe(anyio.get_cancelled_exc_class()))
    await anyio.lowlevel.checkpoint_if_cancelled()
    return outcome


class ReferenceServer:
    """One configured server: its ports, the engine over its store, and the MCP handlers over them.

    The handlers (``list_tools``, ``call_tool``) and the steps of a call (``serve``, ``admitted``,
    ``execute``) are public methods, so that a server of your own can extend one step; every other
    difference goes through ``ServerPorts``."""

    def __init__(self, config: ServerConfig, ports: ServerPorts | None = None) -> None:
        self.config = config
        self.ports = ports = (ports or build_ports(config)).completed(config)
        assert ports.host and ports.grants and ports.gates and ports.oracle and ports.deadlines  # completed()
        self.store, self.policy_for = ports.store, ports.policies
        self.host, self.grants, self.gates = ports.host, ports.grants, ports.gates
        self.oracle, self.deadlines = ports.oracle, ports.deadlines
        self.engine = ports.engine(self.store, ports.cipher, self.policy_for, config.derived_key("page-cursor"),
                                   digest_key=config.derived_key("stored-digest"), limits=config.limits)
        self.audit = AuditJournal(self.store, refused_rows=config.limits.expiry.refused_audit_rows)
        self.engine.start_housekeeping()
        self.item_counts = ItemCounts(_CONTRACT)
        self.tools = {name: _advertised(name) for name in _CONTRACT.tools}
        # Told the session (None over stdio) and principal of each bound call: the HTTP edge bounds sessions by it.
        self.on_bound_call: Callable[[str | None, str], None] | None = None
        self.server = Server(
            SERVER_NAME,
            version="1.0.0",
            on_list_tools=self.list_tools,
            on_call_tool=self.call_tool,
        )

    async def run(self, read: Any, write: Any) -> None:
        """One MCP session over these streams (stdio's, or an in-memory pair)."""
        await self.server.run(read, write, self.server.create_initialization_options())

    # -- binding -------------------------------------------------------------------------------------

    def trusted_binding(self, request: ServerRequestContext) -> Binding | None:
        """The verified binding; None when the request carries none at all; else the constant -32603."""
        meta: Mapping[str, Any] = request.meta or {}
        if HOST_BINDING_META_KEY not in meta:
            return None
        try:
            binding = self.host.verify(meta[HOST_BINDING_META_KEY])
        except BindingRejected as rejected:
            log.info("binding refused: %s", rejected.reason)
            raise protocol_error(_UNTRUSTED) from None
        except MCPError:
            raise
        except Exception:  # anything unforeseen is the same constant -32603
            log.exception("binding check failed")
            raise protocol_error(_UNTRUSTED) from None
        if self.on_bound_call is not None:
            headers = getattr(request.request, "headers", None)  # the HTTP request's; none over stdio
            self.on_bound_call(headers.get("mcp-session-id") if headers is not None else None, binding.principal)
        return binding

    async def list_tools(
        self, request: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        binding = self.trusted_binding(request)
        granted = self.grants.tools_for(scope_of(binding), binding.principal) if binding else frozenset()
        return types.ListToolsResult(tools=[self.tools[name] for name in _CONTRACT.tools if name in granted])

    # -- tools/call ----------------------------------------------------------------------------------

    async def call_tool(
        self, request: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        binding = self.trusted_binding(request)
        if binding is None:
            raise protocol_error(_UNTRUSTED)
        tool = params.name
        if binding.audit_id is None:  # the host names every call it makes (EMC-HP-053)
            log.info("binding refused: missing_audit_id")
            await self._refused_early(binding, tool, _UNTRUSTED)
        if tool not in self.grants.tools_for(scope_of(binding), binding.principal):
            await self._refused_early(binding, tool, _UNKNOWN_TOOL)
        call = CallContext(tool, binding, binding.audit_id, params.arguments if params.arguments is not None else {},
                           datetime.now(UTC), self.audit, self.deadlines, request=request, params=params)
        try:
            if call.deadline_passed("arrival"):  # nothing is read or written (EMC-HP-054)
                result: Outcome | types.InputRequiredResult = Outcome(code="DEADLINE_EXCEEDED")
            else:
                result = await self.serve(call)
        except MCPError as refusal:
            await self._audit_quietly(binding, tool, str(refusal.error.code))
            raise
        except anyio.get_cancelled_exc_class():
            # notifications/cancelled: the SDK drops the answer; the journal still records the call (EMC-HP-056),
            # as cancelled unless it had already ended and been journaled as it ended.
            if not call.journaled:
                with anyio.CancelScope(shield=True):
                    await self._audit_quietly(binding, tool, "cancelled")
            raise
        except Exception:  # anything unforeseen leaves as a constant envelope, never as text
            log.exception("tool call failed")
            call.forget_writes()
            result = unforeseen(tool)
        if isinstance(result, types.InputRequiredResult):
            await self._audit_quietly(binding, tool, "input_required")
            return result
        if call.journaled:
            return tool_result(envelope(result, call.audit_id))  # journaled on the worker thread that ran the call
        try:
            with anyio.CancelScope(shield=True):  # a commit that beat a cancellation is still journaled
                await self._audit(binding, tool, result.code or "ok", call.audit_id)
        except Exception:  # an unrecorded call cannot be vouched for
            log.exception("audit journal write failed")
            result = unforeseen(tool)
        return tool_result(envelope(result, call.audit_id))

    async def serve(self, call: CallContext) -> Outcome | types.InputRequiredResult:  # noqa: PLR0911 - one return per refusal, in the profile's order
        """A bound, granted call on time: admitted, replayed or confirmed, then executed, in the profile's order."""
        policy = self.policy_for(scope_of(call.binding))
        gated = {t for t, on in (("engram_memory_capture", policy.confirm_capture),
                                 ("engram_memory_request_admission", policy.confirm_admission)) if on}
        if not confirmation_required(call.tool, gated):
            # No gate to wait for: quota, arguments, replay, clock, deadline, the operation and its journal row,
            # all in one hand-off to a worker thread.
            return await _in_worker(call, self._ungated)
        admitted = await anyio.to_thread.run_sync(self.admitted, call)
        if isinstance(admitted, Outcome):
            return admitted
        call.arguments = admitted
        early = await anyio.to_thread.run_sync(self._replay_or_clock, call)
        if early is not None:
            return early  # a completed mutation is never confirmed twice
        approval = await self.confirmation(call, int(policy.confirmation_ttl.total_seconds()))
        if isinstance(approval, types.InputRequiredResult):
            return approval
        if approval is None or approval_too_old(approval):  # the window runs to the start of the commit (EMC-HP-066)
            return Outcome(code="gate_failed")
        if call.deadline_passed("after-confirmation"):  # again after the wait, before the commit (EMC-HP-055)
            return Outcome(code="DEADLINE_EXCEEDED")
        call.approved_at = approval
        return await _in_worker(call, self.execute)

    def admitted(self, call: CallContext) -> Outcome | dict[str, Any]:
        """On a worker thread (the quota is counted in the store): the call's quota, then every argument rule but
        the clock's (EMC-HP-022 step 3), then purpose and capture authority; the arguments, or the refusal."""
        tool, binding, arguments = call.tool, call.binding, call.arguments
        try:
            admitted = self.engine.admit_call(binding, call.now)
        except Exception:  # nothing has started yet, so no mutation's outcome is in doubt
            log.exception("counting the call against its quota failed")
            return Outcome(code="STORE_UNAVAILABLE")
        if not admitted:
            return Outcome(code="RATE_LIMITED")  # over a call quota: refused before anything is read or written
        if self.item_counts.over(tool, arguments):  # the oracle's own verdict, without its per-item listing
            return Outcome(code=self.item_counts.code)
        verdict = self.oracle.verdict(tool, arguments)
        if not verdict.valid:
            return Outcome(code=verdict.code)
        whole = _integral(arguments)
        if _purpose(tool, whole) not in (None, binding.purpose_ref):
            raise protocol_error(_UNTRUSTED)
        if tool == "engram_memory_capture" and not self.grants.may_capture(scope_of(binding), binding.principal):
            return Outcome(code="UNAUTHORIZED")  # granted the tool, not the authority in this scope (EMC-HP-057)
        return whole

    def _replay_or_clock(self, call: CallContext) -> Outcome | None:
        """A completed mutation's replay (or conflict); else the clock's refusal of a first execution; else None.

        The clock judges a first execution only: a retry keeps the retention of its first capture (EMC-IDEM-013)."""
        if _CONTRACT.tools[call.tool].idempotent:
            replay = self.engine.replay(call.tool, call.binding, dict(call.arguments))
            if replay is not None:
                return replay
        timely = self.oracle.clock_verdict(call.tool, call.arguments, now=call.now)
        return None if timely.valid else Outcome(code=timely.code)

    def _ungated(self, call: CallContext) -> Outcome:
        """A call no confirmation gates, on a worker thread: its admission, its replay, then a first execution."""
        admitted = self.admitted(call)
        if isinstance(admitted, Outcome):
            return call.settle(admitted)
        call.arguments = admitted
        try:
            early = self._replay_or_clock(call)
        except Exception:
            log.exception("tool call failed")
            return call.settle(unforeseen(call.tool))
        if early is not None:
            return call.settle(early)
        if call.deadline_passed("before-commit"):  # again before the reservation and the commit (EMC-HP-055)
            return call.settle(Outcome(code="DEADLINE_EXCEEDED"))
        return self.execute(call)

    def execute(self, call: CallContext) -> Outcome:
        """The operation and the call's journal row, on a worker thread."""
        try:
            outcome = self.engine.call(call.tool, call.binding, dict(call.arguments), datetime.now(UTC), call)
        except Exception:  # anything unforeseen leaves as a constant envelope, never as text
            log.exception("tool call failed")
            call.forget_writes()  # whatever the unit of work did, the call is journaled as it ended
            outcome = unforeseen(call.tool)
        return call.settle(outcome)

    async def confirmation(self, call: CallContext, ttl: int) -> Approval:
        """The gate's answer for this call: the approval time, a request for input, or None when refused."""

        async def consume(single_use_id: str) -> bool:
            return await anyio.to_thread.run_sync(self.engine.consume_state, single_use_id)

        return await self.gates.approve(GateCall(call.request, call.params, call.tool, call.binding,
                                                 dict(call.arguments), ttl, consume))

    # -- the journal of refused calls ----------------------------------------------------------------

    async def _audit(self, binding: Binding, tool: str, outcome: str, audit_id: str | None = None) -> None:
        await anyio.to_thread.run_sync(
            partial(self.audit.append, audit_id or _journal_id(binding), binding, tool, outcome)
        )

    async def _refused_early(self, binding: Binding, tool: str, error: Any) -> NoReturn:
        """Refuse a call before it is served: it counts toward the call quota as any call does, and is journaled
        (with what other calls hand in meanwhile), in one hand-off to a worker thread; then the protocol error."""

        def count_and_journal() -> None:
            try:
                self.engine.admit_call(binding, datetime.now(UTC))
            except Exception:
                log.exception("counting a refused call against its quota failed")
            try:
                self.audit.append(_journal_id(binding), binding, tool if tool in _CONTRACT.tools else "unknown",
                                  str(error.jsonrpc_code))
            except Exception:
                log.exception("audit journal write failed")

        await anyio.to_thread.run_sync(count_and_journal)
        raise protocol_error(error)

    async def _audit_quietly(self, binding: Binding, tool: str, outcome: str) -> None:
        """Record a refused call; a failure to record never changes the refusal the client gets."""
        try:
            await self._audit(binding, tool, outcome)
        except Exception:
            log.exception("audit journal write failed")

    def close(self) -> None:
        self.engine.stop_housekeeping()
        self.store.close()
