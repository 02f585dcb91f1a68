"""Faulty variants: the host-owned call context. Each takes from the wrong place, or leaves unchecked, what the
host alone decides about a call: its auditId, its deadline, its cancellation, the approval of a gated call, the
claims and audience of its binding, the issuers and tenants a key is trusted for, capture authority, the tools a
principal is shown, the TTL of a host reference, and the bearer token over HTTP.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import anyio
import jwt
import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import SessionMessage

from engram_mcp.contract.binding import HOST_BINDING_META_KEY, Binding, binding_claims_valid
from engram_mcp.reference._envelope import Outcome, tool_result
from engram_mcp.reference._envelope import envelope as make_envelope
from engram_mcp.reference._ports import Scope
from engram_mcp.reference._server import protocol_error
from engram_mcp.reference.server import (
    BearerGuard,
    CallContext,
    Deadlines,
    DeadlineStage,
    GateCall,
    Grants,
    HostBinding,
    SignedBindings,
)
from tests.faulty.catalog import CONTRACT, UNKNOWN_TOOL, Everything, all_tools, variant
from tests.variant_server import ListHandler, Seams, Served, Step

# -- auditId ---------------------------------------------------------------------------------------------------------


def _minted_audit_id() -> str:
    return "audit_" + secrets.token_hex(16)


@variant(
    "audit-id-minted-by-server", breaks=["EMC-HOST-014", "EMC-HP-052"], caught_by=["host.audit-echo"], era="modern"
)
def audit_id_minted_by_server(seams: Seams) -> None:
    """The envelope carries an auditId the server made up, not the one the host bound to the call."""

    def rewrite(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        envelope["auditId"] = _minted_audit_id()
        return envelope

    seams.rewrites.append(rewrite)


class _FilledAuditId:
    """Host bindings whose missing audit_id the server fills in itself."""

    def __init__(self, inner: HostBinding) -> None:
        self.inner = inner

    def verify(self, token: Any) -> Binding:
        bound = self.inner.verify(token)
        return dataclasses.replace(bound, audit_id=_minted_audit_id()) if bound.audit_id is None else bound


@variant("audit-id-filled-in", breaks=["EMC-HP-053"], caught_by=["host.audit-required"], era="legacy")
def audit_id_filled_in(seams: Seams) -> None:
    """A binding without audit_id is served: the server names the call itself instead of refusing it."""
    seams.port("host", _FilledAuditId)


# Host-owned names taken from the wrong place, binding checks left out, discovery that ignores the configuration.


def _lenient_claims(seams: Seams, fill: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Judge the binding's claims after ``fill`` has patched them; the server then reads the claims as sent (so a
    fill that edits them in place shows in the binding, and one that copies them does not)."""
    strict = binding_claims_valid

    def lenient(claims: Any) -> bool:
        return strict(fill(claims)) if isinstance(claims, dict) else strict(claims)

    seams.port("host", lambda host: dataclasses.replace(host, claims_valid=lenient))


@variant("audit-id-format-unchecked", breaks=["EMC-HP-072"], caught_by=["host.audit-malformed"], era="modern")
def audit_id_format_unchecked(seams: Seams) -> None:
    """Any string is taken as the binding's audit_id: one with a space, non-ASCII or over the length runs."""
    well_formed = "audit_" + "0" * 32
    _lenient_claims(seams, lambda claims: {**claims, "audit_id": well_formed}
                    if isinstance(claims.get("audit_id"), str) else claims)


@variant("audit-id-from-arguments", breaks=["EMC-HOST-001", "EMC-HOST-014"],
         caught_by=["arguments.host-owned-fields", "host.audit-echo"], era="legacy")
def audit_id_from_arguments(seams: Seams) -> None:
    """An auditId in the arguments is taken as the call's auditId instead of being refused, and echoed."""

    async def taking(call: CallContext, serve: Step) -> Served:
        if "auditId" in call.arguments:
            call.arguments = {k: v for k, v in call.arguments.items() if k != "auditId"}
        return await serve(call)

    def echo(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
        claimed = params.arguments.get("auditId") if isinstance(params.arguments, dict) else None
        if isinstance(claimed, str):
            envelope["auditId"] = claimed
        return envelope

    seams.around.append(taking)
    seams.rewrites.append(echo)


# -- approval, binding claims, discovery -------------------------------------------------------------------------------


def _self_approved(call: GateCall) -> bool:
    """Whether the arguments as sent claim the approval (the gate sees the parameters as received)."""
    arguments = call.params.arguments
    return isinstance(arguments, dict) and arguments.get("confirmed") is True


class _SelfApprovalGate:
    """The configured gates, skipped for a call whose arguments say it is confirmed."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def approve(self, call: GateCall) -> Any:
        if _self_approved(call):
            return time.time()
        return await self.inner.approve(call)


@variant("self-approval-honoured", breaks=["EMC-GATE-006"], caught_by=["gate.self-approval"], era="modern")
def self_approval_honoured(seams: Seams) -> None:
    """An argument confirmed: true is read as the approval: it is stripped, and the gate is skipped."""

    async def stripped(call: CallContext, serve: Step) -> Served:
        if call.arguments.get("confirmed") is True:
            call.arguments = {k: v for k, v in call.arguments.items() if k != "confirmed"}
        return await serve(call)

    seams.around.append(stripped)
    seams.port("gates", _SelfApprovalGate)


@variant("binding-agent-id-optional", breaks=["EMC-HP-005"], caught_by=["binding.claims"], era="legacy")
def binding_agent_id_optional(seams: Seams) -> None:
    """A binding without agent_id is served, as if the host's agent were unnamed."""

    def unnamed(claims: dict[str, Any]) -> dict[str, Any]:
        claims.setdefault("agent_id", "agent-unnamed")  # in place: the server reads this dict next
        return claims

    _lenient_claims(seams, unnamed)


class _SelfNamedAudience:
    """Host bindings checked against the audience each names itself."""

    def __init__(self, inner: Any) -> None:
        assert isinstance(inner, SignedBindings), "the variant narrows the configured signed bindings"
        self.inner = inner

    def verify(self, token: Any) -> Binding:
        try:
            named = jwt.decode(token, options={"verify_signature": False}).get("aud")
        except Exception:  # anything unreadable is refused as the reference refuses it
            named = None
        checked = dataclasses.replace(self.inner, audience=named) if isinstance(named, str) else self.inner
        return checked.verify(token)


@variant("binding-audience-unchecked", breaks=["EMC-HP-006"], caught_by=["binding.audience"], era="modern")
def binding_audience_unchecked(seams: Seams) -> None:
    """A binding is checked against the audience it names itself, so one minted for another server passes."""
    seams.port("host", _SelfNamedAudience)


@variant("binding-lifetime-uncapped", breaks=["EMC-HP-007"], caught_by=["binding.max-lifetime"], era="legacy")
def binding_lifetime_uncapped(seams: Seams) -> None:
    """A binding's lifetime is not capped: one valid for a day is served."""
    seams.port("host", lambda host: dataclasses.replace(host, max_lifetime=10**9))


@variant("unbound-call-unknown-tool", breaks=["EMC-HP-011"], caught_by=["binding.untrusted-call"], era="modern")
def unbound_call_unknown_tool(seams: Seams) -> None:
    """A call with no binding is answered -32602 'Unknown tool', as if an unbound caller were granted nothing."""

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        if HOST_BINDING_META_KEY not in (request.meta or {}):
            raise protocol_error(UNKNOWN_TOOL)
        return None

    seams.intercept.append(intercept)


@variant("untrusted-list-is-empty", breaks=["EMC-HP-014"], caught_by=["binding.tools-list-untrusted"], era="legacy")
def untrusted_list_is_empty(seams: Seams) -> None:
    """tools/list with an invalid binding is answered as an unbound one (an empty list), not -32603."""

    async def lenient(request: ServerRequestContext, params: Any, handler: ListHandler) -> types.ListToolsResult:
        try:
            return await handler(request, params)
        except MCPError:  # the binding was refused: listed as if none were sent
            return types.ListToolsResult(tools=[])

    seams.list_around.append(lenient)


@variant("every-tool-listed", breaks=["EMC-DISC-002"], caught_by=["discovery.granted-tools"], era="modern")
def every_tool_listed(seams: Seams) -> None:
    """tools/list shows all six tools to every principal of a served scope, whatever it was granted."""

    def rewrite(request: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if not result.tools:
            return result
        return result.model_copy(update={"tools": all_tools(seams.server)})

    seams.list_rewrites.append(rewrite)


@variant("opted-out-scope-listed", breaks=["EMC-DISC-004", "EMC-HP-016"],
         caught_by=["discovery.opted-out-sees-nothing"], era="legacy")
def opted_out_scope_listed(seams: Seams) -> None:
    """A trusted binding for a scope with memory off lists the six tools (calls are still refused)."""

    def rewrite(request: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if result.tools or seams.server.trusted_binding(request) is None:
            return result
        return result.model_copy(update={"tools": all_tools(seams.server)})

    seams.list_rewrites.append(rewrite)


TTL_MAX = CONTRACT.limit("confirmation.ttl.max")


def _shorter_reference_ttl(config: Path) -> None:
    """The server configures, and its profile declares, half the contract's ceiling for a host reference."""
    for name in ("server.toml", "conformance-profile.toml"):
        path = config / name
        path.write_text(re.sub(r"(?m)^reference_ttl_seconds = \d+$", f"reference_ttl_seconds = {TTL_MAX // 2}",
                               path.read_text(encoding="utf-8")), encoding="utf-8")


@variant("reference-ttl-configured-ignored", breaks=["EMC-HP-063", "EMC-HP-064"],
         caught_by=["confirmation-ref.ttl-ceiling"], era="modern", configure=_shorter_reference_ttl)
def reference_ttl_configured_ignored(seams: Seams) -> None:
    """A reference is held to the contract's ceiling, not to the shorter TTL the server was configured with."""
    seams.reconfigure(confirmation=dataclasses.replace(seams.config.confirmation, reference_ttl_seconds=TTL_MAX))


class _OptionalBearer(BearerGuard):
    """A bearer guard that checks a token when one is sent, and lets a request with none through."""

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and b"authorization" not in dict(scope.get("headers", [])):
            await self.app(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


@variant("http-bearer-optional", breaks=["EMC-HP-023"], caught_by=["wiring.http-bearer"], era="legacy",
         transport="http")
def http_bearer_optional(seams: Seams) -> None:
    """Over HTTP a wrong bearer token is refused, but a request with no Authorization header is served."""
    seams.bearer_guard = _OptionalBearer


# -- deadline and cancellation ---------------------------------------------------------------------------------------


class _JudgedDeadlines:
    """The server's deadlines, acted on only at the stages ``judge`` names."""

    def __init__(self, inner: Deadlines, judge: Callable[[DeadlineStage], bool]) -> None:
        self.inner, self.judge = inner, judge

    def passed(self, call: CallContext, stage: DeadlineStage) -> bool:
        return self.judge(stage) and self.inner.passed(call, stage)


def _deadline_judge(seams: Seams, judge: Callable[[DeadlineStage], bool]) -> None:
    """Replace the server's deadline test; ``judge`` gets the stage asking."""
    seams.port("deadlines", lambda deadlines: _JudgedDeadlines(deadlines, judge))


@variant("deadline-ignored", breaks=["EMC-HOST-015", "EMC-HP-054"], caught_by=["host.deadline-passed"], era="legacy")
def deadline_ignored(seams: Seams) -> None:
    """The binding's deadline is read and never acted on: a call past it runs."""
    _deadline_judge(seams, lambda stage: False)


@variant("deadline-judged-on-arrival-only", breaks=["EMC-HP-055"],
         caught_by=["host.deadline-during-confirmation"], era="legacy")
def deadline_judged_on_arrival_only(seams: Seams) -> None:
    """The deadline is judged when the call arrives, not again once the human has answered."""
    _deadline_judge(seams, lambda stage: stage == "arrival")


@variant("cancelled-call-executes", breaks=["EMC-HOST-016", "EMC-HP-056"], caught_by=["host.cancel-before-commit"],
         era="legacy")
def cancelled_call_executes(seams: Seams) -> None:
    """notifications/cancelled does not stop a call: it keeps waiting for the approval, then commits."""

    async def shielded(call: CallContext, serve: Step) -> Served:
        with anyio.CancelScope(shield=True):
            return await serve(call)

    seams.around.append(shielded)


# -- key trust and capture authority ---------------------------------------------------------------------------------


def _trust_widened(seams: Seams, **widened: Any) -> None:
    """Every configured host key, trusted more widely (for bindings and host references alike)."""
    keys = seams.config.trusted_keys
    seams.reconfigure(trusted_keys={kid: dataclasses.replace(host, **widened) for kid, host in keys.items()})


@variant("foreign-tenant-memory-off", breaks=["EMC-HOST-011", "EMC-HP-008"], caught_by=["host.foreign-tenant"],
         era="modern")
def foreign_tenant_memory_off(seams: Seams) -> None:
    """A key is trusted for any tenant: a tenant it was never trusted for reads as memory off (-32602, empty list)."""
    _trust_widened(seams, tenants=Everything())


@variant("foreign-issuer-accepted", breaks=["EMC-HOST-011", "EMC-HP-008"], caught_by=["host.foreign-issuer"],
         era="legacy")
def foreign_issuer_accepted(seams: Seams) -> None:
    """A key is trusted whatever issuer the binding names."""
    _trust_widened(seams, issuers=Everything())


class _CaptureEverywhere:
    """The configured grants, with capture authority wherever the tool is granted."""

    def __init__(self, inner: Grants) -> None:
        self.inner = inner

    def tools_for(self, scope: Scope, principal: str) -> frozenset[str]:
        return self.inner.tools_for(scope, principal)

    def may_capture(self, scope: Scope, principal: str) -> bool:
        return True


@variant("capture-without-authority", breaks=["EMC-CAP-018", "EMC-HP-057"], caught_by=["host.capture-unauthorized"],
         era="modern")
def capture_without_authority(seams: Seams) -> None:
    """A principal granted capture may capture in every scope, whatever authority the scope denies it."""
    seams.port("grants", _CaptureEverywhere)


# -- answers to cancelled calls ----------------------------------------------------------------------------------------


CancelAnswer = Callable[[Any, str, str], Any]  # (request id, tool, audit id) -> the JSON-RPC message to send


def _bound_call(params: Mapping[str, Any]) -> tuple[str, str] | None:
    """The tool and the host's audit id of a tools/call, read from its binding (unverified); None when unreadable."""
    token = str((params.get("_meta") or {}).get(HOST_BINDING_META_KEY))
    with contextlib.suppress(Exception):
        claims = jwt.decode(token, options={"verify_signature": False})
        return str(params.get("name")), claims["audit_id"]
    return None


def answer_cancelled_calls(seams: Seams, answer: CancelAnswer) -> None:
    """Answer each cancelled tools/call with ``answer``, beside the reference's own handling of the cancellation
    (which stops the call and, as the SDK does, sends nothing). The benign catalog uses it too."""
    calls: dict[str, tuple[str, str]] = {}

    async def watch(item: Any, write: Any) -> None:
        message = getattr(item, "message", None)
        method, params = getattr(message, "method", None), getattr(message, "params", None) or {}
        if method == "tools/call":
            bound = _bound_call(params)
            if bound is not None:
                calls[str(getattr(message, "id", None))] = bound
        elif method == "notifications/cancelled" and str(params.get("requestId")) in calls:
            tool, audit_id = calls.pop(str(params.get("requestId")))
            await write.send(SessionMessage(answer(params["requestId"], tool, audit_id)))

    seams.read_watch = watch


def envelope_answer(request_id: Any, code: str, audit_id: str) -> types.JSONRPCResponse:
    """A JSON-RPC response carrying the envelope of a refusal with ``code``."""
    result = tool_result(make_envelope(Outcome(code=code), audit_id))
    return types.JSONRPCResponse(jsonrpc="2.0", id=request_id,
                                 result=result.model_dump(by_alias=True, exclude_none=True, mode="json"))


@variant("cancelled-call-answered-outcome-unknown", breaks=["EMC-HOST-016", "EMC-HP-056"],
         caught_by=["host.cancel-before-commit"], era="legacy")
def cancelled_call_answered_outcome_unknown(seams: Seams) -> None:
    """A cancelled call is stopped, but answered MUTATION_OUTCOME_UNKNOWN, as if the cancellation left it in doubt."""
    answer_cancelled_calls(
        seams, lambda request_id, tool, audit_id: envelope_answer(request_id, "MUTATION_OUTCOME_UNKNOWN", audit_id))


# -- deadlines and confirmed retries -------------------------------------------------------------------------------


class _UndatedRetries:
    """The server's deadlines, never passed for a retry that carries the answer to a confirmation."""

    def __init__(self, inner: Deadlines) -> None:
        self.inner = inner

    def passed(self, call: CallContext, stage: DeadlineStage) -> bool:
        if call.params is not None and call.params.request_state is not None:
            return False
        return self.inner.passed(call, stage)


@variant("deadline-skipped-on-confirmed-retry", breaks=["EMC-HP-055"],
         caught_by=["host.deadline-during-confirmation"], era="modern")
def deadline_skipped_on_confirmed_retry(seams: Seams) -> None:
    """A 2026-07-28 retry that carries the answer to a confirmation is run whatever its binding's deadline says."""
    seams.port("deadlines", _UndatedRetries)


@variant("replay-refused-after-first-deadline", breaks=["EMC-HP-055"],
         caught_by=["host.deadline-after-commit"], era="modern")
def replay_refused_after_first_deadline(seams: Seams) -> None:
    """The first call's deadline is kept with the idempotency key, and a replay after it is DEADLINE_EXCEEDED."""
    deadlines: dict[tuple[str, str], float] = {}  # outside the overrides: it outlives each call

    def keyed(tool: str, arguments: Any) -> tuple[str, str]:
        return tool, str((arguments or {}).get("idempotency_key"))

    def remembering(call: Callable[..., Outcome]) -> Callable[..., Outcome]:
        def remembered(tool: str, caller: Binding, arguments: dict[str, Any], *args: Any, **kwargs: Any) -> Outcome:
            outcome = call(tool, caller, arguments, *args, **kwargs)
            if outcome.ok and caller.deadline is not None:
                deadlines.setdefault(keyed(tool, arguments), caller.deadline)
            return outcome

        return remembered

    def judging(replay: Callable[..., Outcome | None]) -> Callable[..., Outcome | None]:
        def judged(tool: str, caller: Binding, arguments: dict[str, Any]) -> Outcome | None:
            outcome = replay(tool, caller, arguments)
            first = deadlines.get(keyed(tool, arguments))
            if outcome is not None and first is not None and time.time() > first:
                return Outcome(code="DEADLINE_EXCEEDED")
            return outcome

        return judged

    seams.override("engine", "call", remembering)
    seams.override("engine", "replay", judging)
