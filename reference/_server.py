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
import time
from collections.abc import Callable, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from functools import partial
from typing import Any, NoReturn

import anyio
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram_mcp.contract import ArgumentOracle, load
from engram_mcp.contract.binding import (
    CONFIRMATION_INPUT_KEY,
    CONFIRMATION_REF_META_KEY,
    CONFIRMATION_REQUESTED_SCHEMA,
    HOST_BINDING_META_KEY,
    Binding,
    BindingRejected,
    ConfirmationSealer,
    ConfirmationState,
    approval_too_old,
    check_reference,
    check_retry,
    confirmation_message,
    confirmation_required,
    deadline_passed,
    is_approval,
    operation_target,
    supports_form_elicitation,
    verify_binding,
)
from engram_mcp.reference._audit import AuditJournal
from engram_mcp.reference._config import ServerConfig
from engram_mcp.reference._core import Engine, scope_of
from engram_mcp.reference._envelope import Outcome, Refusal, envelope, tool_result
from engram_mcp.reference._ports import StoreTransaction
from engram_mcp.reference._precheck import ItemCounts
from engram_mcp.reference._wiring import ServerPorts, build_ports

log = logging.getLogger("engram_mcp.reference")

SERVER_NAME = "engram-reference"
_CONTRACT = load()
_UNKNOWN_TOOL = _CONTRACT.protocol_errors["unknown_tool"]
_UNTRUSTED = _CONTRACT.protocol_errors["trusted_context_unavailable"]


def _protocol_error(error: Any) -> MCPError:
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


class _CancelProbe:
    """Whether the call's task has been cancelled (a notifications/cancelled), asked from the worker thread that
    runs the call: the thread cannot be interrupted, so the mutation's guard asks once the store's lock is held."""

    def __init__(self, cancelled: type[BaseException]) -> None:
        self._cancelled = cancelled

    def is_set(self) -> bool:
        try:
            anyio.from_thread.check_cancelled()
        except self._cancelled:
            return True
        return False


async def _in_worker(work: Callable[[_CancelProbe], Outcome]) -> Outcome:
    """``work`` on a worker thread, which runs to its end; a cancellation meanwhile is raised here afterwards."""
    outcome = await anyio.to_thread.run_sync(work, _CancelProbe(anyio.get_cancelled_exc_class()))
    await anyio.lowlevel.checkpoint_if_cancelled()
    return outcome


def _unforeseen(tool: str) -> Outcome:
    """The constant outcome of an unexpected failure: a mutation may or may not have happened."""
    mutating = _CONTRACT.tools[tool].mutability != "read-only"
    return Outcome(code="MUTATION_OUTCOME_UNKNOWN" if mutating else "STORE_UNAVAILABLE")


class _InlineAudit:
    """A call's audit row: written by a successful mutation inside its own unit of work, else by ``settle``
    on the same worker thread, so a call costs one hand-off to a thread, not one more for its journal."""

    def __init__(self, journal: AuditJournal, audit_id: str, binding: Binding, tool: str) -> None:
        self.journal, self.audit_id, self.binding, self.tool = journal, audit_id, binding, tool
        self.written = False  # by the mutation's unit of work
        self.journaled = False  # the call's row is in the journal, whoever wrote it

    def write(self, tx: StoreTransaction) -> None:
        self.journal.append_in(tx, self.audit_id, self.binding, self.tool, "ok")
        self.written = True

    def settle(self, outcome: Outcome, cancelled: _CancelProbe) -> Outcome:
        """Journal the call as it ended, on the worker thread; a cancelled call is left to the edge, which
        journals it as cancelled. An unrecorded call cannot be vouched for, so a failed write answers the
        constant unforeseen outcome."""
        if self.written and outcome.ok:
            self.journaled = True
            return outcome
        if cancelled.is_set():
            return outcome
        try:
            self.journal.append(self.audit_id, self.binding, self.tool, outcome.code or "ok")
        except Exception:
            log.exception("audit journal write failed")
            return _unforeseen(self.tool)
        self.journaled = True
        return outcome


# The call being served (set per task by _call_tool), so its commit can carry the audit row.
_INLINE_AUDIT: ContextVar[_InlineAudit | None] = ContextVar("inline_audit", default=None)


class ReferenceServer:
    """One configured server: the store, the engine, and the MCP handlers over them."""

    def __init__(self, config: ServerConfig, ports: ServerPorts | None = None) -> None:
        self.config = config
        ports = ports or build_ports(config)
        self.store = ports.store
        self.policy_for = ports.policies
        self.engine = Engine(self.store, ports.cipher, self.policy_for, config.derived_key("page-cursor"),
                             digest_key=config.derived_key("stored-digest"), limits=config.limits)
        self.audit = AuditJournal(self.store, refused_rows=config.limits.expiry.refused_audit_rows)
        self.engine.start_housekeeping()
        self.sealer = ConfirmationSealer(config.derived_key("request-state"))
        self.oracle = ArgumentOracle()
        self.item_counts = ItemCounts(_CONTRACT)
        self.tools = {name: _advertised(name) for name in _CONTRACT.tools}
        # Told the session (None over stdio) and principal of each bound call: the HTTP edge bounds sessions by it.
        self.on_bound_call: Callable[[str | None, str], None] | None = None
        self.server = Server(
            SERVER_NAME,
            version="1.0.0",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )

    # -- binding -------------------------------------------------------------

    def _binding(self, ctx: ServerRequestContext) -> Binding | None:
        """The verified binding; None when the request carries none at all."""
        meta: Mapping[str, Any] = ctx.meta or {}
        if HOST_BINDING_META_KEY not in meta:
            return None
        try:
            return verify_binding(meta[HOST_BINDING_META_KEY], self.config.trusted_keys, audience=self.config.audience)
        except BindingRejected as rejected:
            log.info("binding refused: %s", rejected.reason)
            raise _protocol_error(_UNTRUSTED) from None

    def _trusted_binding(self, ctx: ServerRequestContext) -> Binding | None:
        """The binding, with any unforeseen failure turned into the constant -32603."""
        try:
            binding = self._binding(ctx)
        except MCPError:
            raise
        except Exception:
            log.exception("binding check failed")
            raise _protocol_error(_UNTRUSTED) from None
        if binding is not None and self.on_bound_call is not None:
            headers = getattr(ctx.request, "headers", None)  # the HTTP request's; none over stdio
            self.on_bound_call(headers.get("mcp-session-id") if headers is not None else None, binding.principal)
        return binding

    async def _list_tools(
        self, ctx: ServerRequestContext, params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        binding = self._trusted_binding(ctx)
        granted = self.config.tools_for(scope_of(binding), binding.principal) if binding else frozenset()
        return types.ListToolsResult(tools=[self.tools[name] for name in _CONTRACT.tools if name in granted])

    # -- tools/call ----------------------------------------------------------

    async def _call_tool(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        binding = self._trusted_binding(ctx)
        if binding is None:
            raise _protocol_error(_UNTRUSTED)
        tool = params.name
        if binding.audit_id is None:  # the host names every call it makes (EMC-HP-053)
            log.info("binding refused: missing_audit_id")
            await self._refused_early(binding, tool, _UNTRUSTED)
        if tool not in self.config.tools_for(scope_of(binding), binding.principal):
            await self._refused_early(binding, tool, _UNKNOWN_TOOL)
        audit_id = binding.audit_id
        inline = _InlineAudit(self.audit, audit_id, binding, tool)
        try:
            if deadline_passed(binding):  # on arrival: nothing is read or written (EMC-HP-054)
                result: Outcome | types.InputRequiredResult = Outcome(code="DEADLINE_EXCEEDED")
            else:
                _INLINE_AUDIT.set(inline)
                result = await self._guarded_call(ctx, params, tool, binding, audit_id)
        except MCPError as refusal:
            await self._audit_quietly(binding, tool, str(refusal.error.code))
            raise
        except anyio.get_cancelled_exc_class():
            # notifications/cancelled: the SDK drops the answer; the journal still records the call (EMC-HP-056),
            # as cancelled unless it had already ended and been journaled as it ended.
            if not inline.journaled:
                with anyio.CancelScope(shield=True):
                    await self._audit_quietly(binding, tool, "cancelled")
            raise
        except Exception:  # anything unforeseen leaves as a constant envelope, never as text
            log.exception("tool call failed")
            inline.written = inline.journaled = False  # whatever the unit of work did, it is journaled below
            result = _unforeseen(tool)
        if isinstance(result, types.InputRequiredResult):
            await self._audit_quietly(binding, tool, "input_required")
            return result
        if inline.journaled:
            return tool_result(envelope(result, audit_id))  # journaled on the worker thread that ran the call
        try:
            with anyio.CancelScope(shield=True):  # a commit that beat a cancellation is still journaled
                await self._audit(binding, tool, result.code or "ok", audit_id)
        except Exception:  # an unrecorded call cannot be vouched for
            log.exception("audit journal write failed")
            result = _unforeseen(tool)
        return tool_result(envelope(result, audit_id))

    async def _guarded_call(  # noqa: PLR0911 - one return per refusal, in the profile's order
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams, tool: str, binding: Binding, audit_id: str
    ) -> Outcome | types.InputRequiredResult:
        arguments = params.arguments if params.arguments is not None else {}
        now = datetime.now(UTC)
        policy = self.policy_for(scope_of(binding))
        gated = {t for t, on in (("engram_memory_capture", policy.confirm_capture),
                                 ("engram_memory_request_admission", policy.confirm_admission)) if on}
        inline = _INLINE_AUDIT.get()
        journal = inline if inline is not None and inline.audit_id == audit_id else None
        if not confirmation_required(tool, gated):
            # No gate to wait for: quota, arguments, replay, clock, deadline, the operation and its journal row,
            # all in one hand-off to a worker thread.
            return await _in_worker(partial(self._ungated, tool, binding, arguments, now, journal))
        admitted = await anyio.to_thread.run_sync(self._admitted, tool, binding, arguments, now)
        if isinstance(admitted, Outcome):
            return admitted
        arguments = admitted
        if _CONTRACT.tools[tool].idempotent:
            replay = await anyio.to_thread.run_sync(self.engine.replay, tool, binding, arguments)
            if replay is not None:
                return replay  # a completed mutation is never confirmed twice
        timely = self.oracle.clock_verdict(tool, arguments, now=now)
        if not timely.valid:
            return Outcome(code=timely.code)
        gate = await self._gate(ctx, params, tool, binding, arguments, int(policy.confirmation_ttl.total_seconds()))
        if isinstance(gate, types.InputRequiredResult):
            return gate
        if gate is None or approval_too_old(gate):  # the window runs to the start of the commit (EMC-HP-066)
            return Outcome(code="gate_failed")
        if deadline_passed(binding):  # again after the wait, before the reservation and the commit (EMC-HP-055)
            return Outcome(code="DEADLINE_EXCEEDED")
        return await _in_worker(partial(self._execute, tool, binding, arguments, journal, approved_at=gate))

    def _admitted(
        self, tool: str, binding: Binding, arguments: dict[str, Any], now: datetime
    ) -> Outcome | dict[str, Any]:
        """On a worker thread (the quota is counted in the store): the call's quota, then every argument rule but
        the clock's (EMC-HP-022 step 3), then purpose and capture authority; the arguments, or the refusal."""
        try:
            admitted = self.engine.admit_call(binding, now)
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
        arguments = _integral(arguments)
        if _purpose(tool, arguments) not in (None, binding.purpose_ref):
            raise _protocol_error(_UNTRUSTED)
        if tool == "engram_memory_capture" and not self.config.may_capture(scope_of(binding), binding.principal):
            return Outcome(code="UNAUTHORIZED")  # granted the tool, not the authority in this scope (EMC-HP-057)
        return arguments

    def _ungated(
        self, tool: str, binding: Binding, arguments: dict[str, Any], now: datetime,
        journal: _InlineAudit | None, cancelled: _CancelProbe,
    ) -> Outcome:
        """A call no confirmation gates, on a worker thread: its admission, its replay, then a first execution."""
        admitted = self._admitted(tool, binding, arguments, now)
        if isinstance(admitted, Outcome):
            return self._settled(admitted, journal, cancelled)
        arguments = admitted
        if _CONTRACT.tools[tool].idempotent:
            try:
                replay = self.engine.replay(tool, binding, arguments)
            except Exception:
                log.exception("tool call failed")
                return self._settled(_unforeseen(tool), journal, cancelled)
            if replay is not None:
                return self._settled(replay, journal, cancelled)
        # The clock judges a first execution only: a retry keeps the retention of its first capture (EMC-IDEM-013).
        timely = self.oracle.clock_verdict(tool, arguments, now=now)
        if not timely.valid:
            return self._settled(Outcome(code=timely.code), journal, cancelled)
        if deadline_passed(binding):  # again before the reservation and the commit (EMC-HP-055)
            return self._settled(Outcome(code="DEADLINE_EXCEEDED"), journal, cancelled)
        return self._execute(tool, binding, arguments, journal, cancelled)

    @staticmethod
    def _settled(outcome: Outcome, journal: _InlineAudit | None, cancelled: _CancelProbe) -> Outcome:
        return journal.settle(outcome, cancelled) if journal is not None else outcome

    def _execute(
        self, tool: str, binding: Binding, arguments: dict[str, Any], journal: _InlineAudit | None,
        cancelled: _CancelProbe, approved_at: float | None = None,
    ) -> Outcome:
        """The operation and the call's journal row, on a worker thread."""

        def last_word() -> None:
            """Asked again once the unit of work holds the store's lock: the wait for it may have outlived the call."""
            if cancelled.is_set():
                raise Refusal("CANCELLED")
            if approved_at is not None and approval_too_old(approved_at):
                raise Refusal("gate_failed")
            if deadline_passed(binding):
                raise Refusal("DEADLINE_EXCEEDED")

        try:
            outcome = self.engine.call(tool, binding, arguments, datetime.now(UTC),
                                       journal.write if journal is not None else None, last_word)
        except Exception:  # anything unforeseen leaves as a constant envelope, never as text
            log.exception("tool call failed")
            if journal is not None:
                journal.written = False  # whatever the unit of work did, the call is journaled as it ended
            outcome = _unforeseen(tool)
        return self._settled(outcome, journal, cancelled)

    async def _gate(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams, tool: str,
        binding: Binding, arguments: dict[str, Any], ttl: int,
    ) -> float | types.InputRequiredResult | None:
        """The approval time by the configured modes: a carried reference is judged alone, never by asking."""
        modes = self.config.confirmation.modes
        meta: Mapping[str, Any] = ctx.meta or {}
        if "host-reference" in modes and CONFIRMATION_REF_META_KEY in meta:
            return await self._confirm_reference(meta[CONFIRMATION_REF_META_KEY], tool, binding, arguments)
        if "server-initiated" in modes:
            return await self._confirm(ctx, params, tool, binding, arguments, ttl)
        raise _protocol_error(_UNTRUSTED)  # the contract's missing confirmation reference

    async def _confirm_reference(
        self, token: Any, tool: str, binding: Binding, arguments: dict[str, Any]
    ) -> float | None:
        """The host's approval time when its reference confirms this call, else None; the id is spent first."""
        verdict = check_reference(token, self.config.trusted_keys, audience=self.config.audience, tool=tool,
                                  target=operation_target(tool, arguments), arguments=arguments, binding=binding,
                                  ttl=self.config.confirmation.reference_ttl_seconds)
        if not verdict.approved or verdict.consume is None:
            log.info("confirmation reference refused: %s", verdict.reason)
            return None
        if not await anyio.to_thread.run_sync(self.engine.consume_state, verdict.consume):
            log.info("confirmation reference refused: replayed")
            return None
        return verdict.approved_at

    async def _confirm(
        self, ctx: ServerRequestContext, params: types.CallToolRequestParams, tool: str,
        binding: Binding, arguments: dict[str, Any], ttl: int,
    ) -> float | types.InputRequiredResult | None:
        """The approval time, None when refused, or the modern era's request for input."""
        capabilities = ctx.session.client_capabilities
        declared = capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities is not None else None
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if not supports_form_elicitation(declared, ctx.protocol_version) or not (
            modern or ctx.session.can_send_request
        ):
            raise _protocol_error(_UNTRUSTED)  # the host cannot carry a confirmation at all
        target = operation_target(tool, arguments)
        if modern:
            if params.request_state is None and params.input_responses is None:
                state = ConfirmationState.mint(tool, target, arguments, binding, ttl=ttl)
                return types.InputRequiredResult(
                    input_requests={
                        CONFIRMATION_INPUT_KEY: types.ElicitRequest(
                            params=types.ElicitRequestFormParams(
                                message=confirmation_message(tool), requested_schema=CONFIRMATION_REQUESTED_SCHEMA
                            )
                        )
                    },
                    request_state=self.sealer.seal_state(state),
                )
            responses = {k: v.model_dump(by_alias=True, exclude_none=True) if hasattr(v, "model_dump") else v
                         for k, v in (params.input_responses or {}).items()}
            verdict = check_retry(self.sealer, request_state=params.request_state, input_responses=responses,
                                  tool=tool, target=target, arguments=arguments, binding=binding)
            if verdict.consume is not None and not await anyio.to_thread.run_sync(
                self.engine.consume_state, verdict.consume
            ):
                return None  # a replayed state
            return time.time() if verdict.approved else None
        try:
            with anyio.fail_after(ttl):
                answer = await ctx.session.elicit_form(
                    confirmation_message(tool), CONFIRMATION_REQUESTED_SCHEMA, related_request_id=ctx.request_id
                )
        except Exception:  # timeout, an error reply, a closed channel: all refuse
            return None
        return time.time() if is_approval(answer) else None

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
        raise _protocol_error(error)

    async def _audit_quietly(self, binding: Binding, tool: str, outcome: str) -> None:
        """Record a refused call; a failure to record never changes the refusal the client gets."""
        try:
            await self._audit(binding, tool, outcome)
        except Exception:
            log.exception("audit journal write failed")

    def close(self) -> None:
        self.engine.stop_housekeeping()
        self.store.close()
