"""Benign variants: lifecycle and idempotency, in codes and orders the contract leaves open. Each server answers a
lifecycle it will not move with its own code, a repeated admission as duplicate_exact, an unknown target before its
gate, a refused key as used up, or lets a host reference's id be presented again.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.contract.binding import Binding, deadline_passed, idempotency_intent, operation_target
from engram_mcp.reference._journal import scope_of
from engram_mcp.reference._server import _integral
from engram_mcp.reference.server import GateCall, HostReferenceGate
from tests.benign.catalog import (
    ADMIT,
    CAPTURE,
    CONTRACT,
    FORGET,
    MUTATIONS,
    WITHDRAW,
    BesideTheStore,
    bound,
    changed_reference_gate,
    journal_refusal,
    refusal,
    value_of,
    variant,
)
from tests.variant_server import Seams, VariantServer


def _target_state(server: VariantServer, binding: Binding, tool: str, ident: str) -> str | None:
    """The state of the call's target in the bound scope (a worker thread's job), None when it has none there.

    One read keyed by the bound scope and the id: it costs the same for an unknown id and another scope's."""
    with server.store.snapshot() as reader:
        found: Any = (reader.record(scope_of(binding), ident) if tool == FORGET
                      else reader.candidate(scope_of(binding), ident))
    return None if found is None else str(found.state)


def _target(tool: str, params: types.CallToolRequestParams) -> str | None:
    name = CONTRACT.tools[tool].target if tool in CONTRACT.tools else None
    ident = params.arguments.get(name) if name and isinstance(params.arguments, dict) else None
    return ident if isinstance(ident, str) else None


@variant("lifecycle-codes", freedom="EMC-LIFE-011: ILLEGAL_TRANSITION, ALREADY_TERMINAL — 'El estado del ciclo de "
         "vida lo prohíbe'; NOT_FOUND is for an unknown or out-of-scope target (§0)")
def lifecycle_codes(seams: Seams) -> None:
    """A target of the bound scope the lifecycle no longer lets move is ILLEGAL_TRANSITION or ALREADY_TERMINAL."""

    async def after(request: ServerRequestContext, params: types.CallToolRequestParams,
                    envelope: dict[str, Any]) -> dict[str, Any]:
        error = envelope.get("error")
        ident = _target(params.name, params)
        if params.name not in (ADMIT, WITHDRAW, FORGET) or not isinstance(error, dict) \
                or error.get("code") != "NOT_FOUND" or ident is None:
            return envelope
        binding = bound(seams, request)
        if binding is None:
            return envelope
        state = await anyio.to_thread.run_sync(_target_state, seams.server, binding, params.name, ident)
        if state is None:
            return envelope  # unknown here: NOT_FOUND, whether or not another scope holds the id
        code = "ALREADY_TERMINAL" if params.name == FORGET and state == "tombstoned" else "ILLEGAL_TRANSITION"
        return refusal(code, envelope["auditId"])

    seams.after.append(after)


def _duplicate_exact(request: ServerRequestContext, params: Any, envelope: dict[str, Any]) -> dict[str, Any]:
    value = value_of(envelope)
    outcome = value.get("outcome") if params.name == ADMIT and value is not None else None
    if value is not None and value.get("replayed") is True and isinstance(outcome, dict):
        outcome["status"] = "duplicate_exact"
        outcome.pop("record_id", None)
    return envelope


@variant("admission-replay-duplicate-exact", freedom="EMC-IDEM-006: 'repetición (duplicate_exact o replayed: "
         "true)'; the admission meaning of duplicate_exact is unverified")
def admission_replay_duplicate_exact(seams: Seams) -> None:
    """A repeated admission answers outcome.status duplicate_exact (still replayed: true, without record_id)."""
    seams.rewrites.append(_duplicate_exact)


def _purpose(tool: str, arguments: dict[str, Any]) -> Any:
    """The purpose_ref a call names (capture's is in its payload), None for a tool without one."""
    payload = arguments.get("payload")
    return payload.get("purpose_ref") if tool == CAPTURE and isinstance(payload, dict) else arguments.get("purpose_ref")


def _reaches_operation(seams: Seams, request: ServerRequestContext, tool: str) -> Binding | None:
    """The binding of a call the reference would judge on its arguments and target (bound, named by the host,
    granted, its deadline not passed), else None: the reference answers the rest itself."""
    binding = seams.server.trusted_binding(request)
    if binding is None or binding.audit_id is None or deadline_passed(binding):
        return None
    return binding if tool in seams.server.grants.tools_for(scope_of(binding), binding.principal) else None


@variant("lookup-before-gate", freedom="EMC-HP-022's order is this project's: the contract does not say whether "
         "the confirmation gate or the target lookup comes first")
def lookup_before_gate(seams: Seams) -> None:
    """withdraw and forget of a target the bound scope does not hold are NOT_FOUND at once, never confirmed first."""

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> dict[str, Any] | None:
        server = seams.server
        ident = _target(params.name, params) if params.name in (WITHDRAW, FORGET) else None
        binding = _reaches_operation(seams, request, params.name) if ident is not None else None
        if binding is None or ident is None or not server.oracle.verdict(params.name, params.arguments).valid:
            return None
        if await anyio.to_thread.run_sync(_target_state, server, binding, params.name, ident) is not None:
            return None
        await journal_refusal(server, binding, params.name, "NOT_FOUND")
        return refusal("NOT_FOUND", str(binding.audit_id))

    seams.intercept.append(intercept)


RESERVING = frozenset({"UNAUTHORIZED", "NOT_FOUND", "ILLEGAL_TRANSITION", "ALREADY_TERMINAL"})


class RefusedKeys:
    """Keys used up by a refusal, in a file beside the store: every server process on the store shares them."""

    def __init__(self, seams: Seams) -> None:
        self._keys = BesideTheStore(seams, ".refused-keys", (
            "CREATE TABLE IF NOT EXISTS refused (tenant TEXT, workspace TEXT, principal TEXT, idempotency_key TEXT, "
            "intent TEXT NOT NULL, code TEXT NOT NULL, PRIMARY KEY (tenant, workspace, principal, idempotency_key))"))

    def find(self, binding: Binding, key: str) -> tuple[str, str] | None:
        row = self._keys.row("SELECT intent, code FROM refused WHERE tenant = ? AND workspace = ? AND principal = ? "
                             "AND idempotency_key = ?", (binding.tenant, binding.workspace, binding.principal, key))
        return (row[0], row[1]) if row else None

    def bind(self, binding: Binding, key: str, intent: str, code: str) -> None:
        self._keys.write("INSERT OR IGNORE INTO refused VALUES (?, ?, ?, ?, ?, ?)",
                         (binding.tenant, binding.workspace, binding.principal, key, intent, code))


def _keyed(params: types.CallToolRequestParams) -> tuple[str, dict[str, Any]] | None:
    """A mutation's idempotency key and its arguments, or None."""
    arguments = params.arguments
    if params.name not in MUTATIONS or not isinstance(arguments, dict):
        return None
    key = arguments.get("idempotency_key")
    return (key, arguments) if isinstance(key, str) else None


def _intent(binding: Binding, tool: str, arguments: dict[str, Any]) -> str:
    arguments = _integral(arguments)  # as the reference keys them: 10.0 is the integer 10 (EMC-ENC-012)
    return idempotency_intent(tool, operation_target(tool, arguments), arguments, binding)


@variant("refusals-reserve-keys", freedom="whether a refusal uses an idempotency key up the contract does not say "
         "(EMC-HP-071 is this project's choice)")
def refusals_reserve_keys(seams: Seams) -> None:
    """A definite refusal of valid arguments binds its key: the same call is refused again, another DIGEST_CONFLICT."""
    keys = RefusedKeys(seams)

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> dict[str, Any] | None:
        server = seams.server
        call = _keyed(params)
        binding = _reaches_operation(seams, request, params.name) if call is not None else None
        if binding is None or call is None or not server.oracle.verdict(params.name, call[1]).valid \
                or _purpose(params.name, call[1]) not in (None, binding.purpose_ref):
            return None  # the reference refuses these first, whatever the key
        held = await anyio.to_thread.run_sync(keys.find, binding, call[0])
        if held is None:
            return None
        code = held[1] if held[0] == _intent(binding, params.name, call[1]) else "DIGEST_CONFLICT"
        await journal_refusal(server, binding, params.name, code)
        return refusal(code, str(binding.audit_id))

    async def after(request: ServerRequestContext, params: types.CallToolRequestParams,
                    envelope: dict[str, Any]) -> dict[str, Any]:
        error = envelope.get("error")
        call = _keyed(params)
        if call is None or not isinstance(error, dict) or error.get("code") not in RESERVING:
            return envelope
        binding = bound(seams, request)
        if binding is not None and seams.server.oracle.verdict(params.name, call[1]).valid:
            await anyio.to_thread.run_sync(keys.bind, binding, call[0], _intent(binding, params.name, call[1]),
                                           error["code"])
        return envelope

    seams.intercept.append(intercept)
    seams.after.append(after)


class _ReusableReferences:
    """Host references judged as the reference judges them, their ids never spent."""

    def __init__(self, inner: HostReferenceGate) -> None:
        self.inner = inner

    async def approve(self, call: GateCall) -> float | None:
        verdict = self.inner.verdict(call)
        return verdict.approved_at if verdict.approved else None


@variant("reference-ids-reusable", freedom="EMC-GATE-003 binds a confirmation to capability, target and operation "
         "digest; single use of a reference id is this project's (EMC-HP-065)")
def reference_ids_reusable(seams: Seams) -> None:
    """A host's confirmation reference is checked as the reference checks it, but its id is never spent."""
    changed_reference_gate(seams, _ReusableReferences)
