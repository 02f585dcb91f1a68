"""Faulty variants: confirmation gates. Each lets a gated call run on less than a human's approval of that very
call: a server-initiated gate that approves unasked, ignores the answer, honours a request state for another
operation, a state never sent, spent or expired; a host-reference gate that times the execution window from the
reference's arrival, lets a reference be spent twice, reads it unsigned, past its exp or beyond the TTL ceiling,
or for another call; and a pair of gates that runs a call no one could confirm, or asks when a reference was carried.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Generic, TypeVar

import jwt

from engram_mcp.contract.binding import (
    CONFIRMATION_INPUT_KEY,
    CONFIRMATION_REF_META_KEY,
    REFERENCE_TOKEN_TYPE,
    BindingRejected,
    StateRejected,
    TrustedHost,
    generate_host_key,
    host_kid,
    is_approval,
    reference_consume_id,
    signed_claims,
)
from engram_mcp.reference.server import (
    ConfirmationGate,
    ElicitationGate,
    GateCall,
    HostReferenceGate,
)
from tests.faulty.catalog import ADMIT, APPROVAL, CAPTURE, Everything, changed_gate, variant
from tests.variant_server import Seams

Approval = Any  # what a gate answers: the approval time, a request for input, or None when refused
ConsumeState = Callable[[str, datetime | None], bool]

Inner = TypeVar("Inner")


class _Wrapping(Generic[Inner]):
    """A gate that changes what the gate it wraps would answer."""

    def __init__(self, inner: Inner) -> None:
        self.inner = inner


# -- confirmation gates ----------------------------------------------------------------------------------------------


class _LegacyAutoApproval(_Wrapping[ElicitationGate]):
    """Approves every legacy-era call at once; the 2026-07-28 era still asks."""

    async def approve(self, call: GateCall) -> Approval:
        if call.modern:
            return await self.inner.approve(call)
        return time.time()


@variant("legacy-gate-auto-approves", breaks=["EMC-GATE-001"], caught_by=["gate.refusal", "gate.approval-runs"],
         era="legacy")
def legacy_gate_auto_approves(seams: Seams) -> None:
    """In the legacy era the gate approves without sending an elicitation."""
    changed_gate(seams, "asking", _LegacyAutoApproval)


class _DeafToAnswers(_Wrapping[ElicitationGate]):
    """Hears every modern retry's answer as an approval."""

    async def approve(self, call: GateCall) -> Approval:
        if call.modern and call.params.input_responses is not None:
            approving = call.params.model_copy(update={"input_responses": {CONFIRMATION_INPUT_KEY: APPROVAL}})
            call = dataclasses.replace(call, params=approving)
        return await self.inner.approve(call)


@variant("modern-gate-ignores-answer", breaks=["EMC-GATE-001", "EMC-HP-029"], caught_by=["gate.refusal"], era="modern")
def modern_gate_ignores_answer(seams: Seams) -> None:
    """In the 2026-07-28 era a retry with a valid state is approved whatever the answer says."""
    changed_gate(seams, "asking", _DeafToAnswers)


class _StateUnboundToTarget(_Wrapping[ElicitationGate]):
    """Judges a modern retry's state on everything but the target and arguments it was minted for."""

    async def approve(self, call: GateCall) -> Approval:
        if not (call.modern and call.params.request_state is not None):
            return await self.inner.approve(call)
        try:
            state = self.inner.sealer.open_state(call.params.request_state)
        except StateRejected:
            return None
        bound = (state.capability, state.principal, state.tenant, state.workspace, state.session)
        binding = call.binding
        if time.time() >= state.expires_at or bound != (call.tool, binding.principal, binding.tenant,
                                                        binding.workspace, binding.session):
            return None
        if not await call.consume(state.nonce):
            return None
        return time.time() if is_approval(call.input_responses().get(CONFIRMATION_INPUT_KEY)) else None


@variant("state-not-bound-to-target", breaks=["EMC-GATE-003", "EMC-HP-027"],
         caught_by=["gate.state-for-another-operation"], era="modern")
def state_not_bound_to_target(seams: Seams) -> None:
    """A request state is checked for tool, principal, scope, session and expiry, but not its target or arguments."""
    changed_gate(seams, "asking", _StateUnboundToTarget)


class _AnswerTrustedWithoutState(_Wrapping[ElicitationGate]):
    """Takes a modern retry's answer at its word when it brings no request state."""

    async def approve(self, call: GateCall) -> Approval:
        if call.modern and call.params.request_state is None and call.params.input_responses is not None:
            return time.time() if is_approval(call.input_responses().get(CONFIRMATION_INPUT_KEY)) else None
        return await self.inner.approve(call)


@variant("answer-without-state", breaks=["EMC-HP-026"], caught_by=["gate.forged-state"], era="modern")
def answer_without_state(seams: Seams) -> None:
    """A 2026-07-28 retry carrying an approving answer but no request_state is approved."""
    changed_gate(seams, "asking", _AnswerTrustedWithoutState)


def _never_spent(inherited: ConsumeState) -> ConsumeState:
    def reusable(nonce: str, now: datetime | None = None) -> bool:
        return True

    return reusable


@variant("state-reusable", breaks=["EMC-HP-038"], caught_by=["gate.reused-state"], era="modern")
def state_reusable(seams: Seams) -> None:
    """Request states are never burnt: a declined state can be answered again."""
    seams.override("engine", "consume_state", _never_spent)


class _AgelessState(_Wrapping[ElicitationGate]):
    """Judges a modern retry's state at the moment it was issued, so it never expires."""

    async def approve(self, call: GateCall) -> Approval:
        if not (call.modern and call.params.request_state is not None):
            return await self.inner.approve(call)
        try:
            issued = self.inner.sealer.open_state(call.params.request_state).issued_at
        except StateRejected:
            return None
        return await self.inner.judge_answer(call, now=issued)


@variant("state-never-expires", breaks=["EMC-GATE-004"], caught_by=["gate.unanswered"], era="modern")
def state_never_expires(seams: Seams) -> None:
    """A request state answered after its TTL is still honoured (expiry is judged at the state's issue time)."""
    changed_gate(seams, "asking", _AgelessState)


class _UnaskedWithoutElicitation(_Wrapping[ElicitationGate]):
    """Runs the call unconfirmed when the client cannot be asked, instead of refusing it."""

    async def approve(self, call: GateCall) -> Approval:
        if not call.can_elicit():
            return time.time()
        return await self.inner.approve(call)


@variant("no-elicitation-runs-unconfirmed", breaks=["EMC-GATE-008"],
         caught_by=["gate.no-confirmation-channel"], era="legacy")
def no_elicitation_runs_unconfirmed(seams: Seams) -> None:
    """A client that declared no elicitation capability gets its gated calls run without confirmation."""
    changed_gate(seams, "asking", _UnaskedWithoutElicitation)


# -- host-reference confirmation -------------------------------------------------------------------------------------


def _reference(call: GateCall) -> Any:
    return call.meta.get(CONFIRMATION_REF_META_KEY)


class _WindowFromReceipt(_Wrapping[HostReferenceGate]):
    """Approves what the host approved, but as of the reference's arrival."""

    async def approve(self, call: GateCall) -> float | None:
        approved_at = await self.inner.approve(call)
        return None if approved_at is None else time.time()


@variant("reference-window-from-receipt", breaks=["EMC-GATE-005", "EMC-HP-066"],
         caught_by=["confirmation-ref.execution-window"], era="legacy")
def reference_window_from_receipt(seams: Seams) -> None:
    """The 30 s execution window runs from when the reference arrived, not from the host's approval."""
    changed_gate(seams, "reference", _WindowFromReceipt)


def _references_never_spent(inherited: ConsumeState) -> ConsumeState:
    def consume(nonce: str, now: datetime | None = None) -> bool:
        return True if nonce.startswith("ref:") else inherited(nonce, now)

    return consume


@variant("reference-replayable", breaks=["EMC-HP-065"],
         caught_by=["confirmation-ref.reused-id", "confirmation-ref.reused-token"],
         era="modern")
def reference_replayable(seams: Seams) -> None:
    """Reference ids are never recorded: a spent reference, or its id under a new signature, confirms again."""
    seams.override("engine", "consume_state", _references_never_spent)


class _ReferenceUnboundToTarget(_Wrapping[HostReferenceGate]):
    """Judges a reference on its signature, expiry, capability and id, not on the call it names."""

    async def approve(self, call: GateCall) -> float | None:
        token = _reference(call)
        if not isinstance(token, str):
            return None
        try:
            claims, _ = self.inner.signed_claims(token, self.inner.trusted_keys, REFERENCE_TOKEN_TYPE)
        except BindingRejected:
            return None
        if claims.get("capability") != call.tool or time.time() >= claims.get("exp", 0):
            return None
        spent = reference_consume_id(host_kid(token), str(claims.get("jti")))
        return claims.get("approved_at") if await call.consume(spent) else None


@variant("reference-not-bound-to-target", breaks=["EMC-GATE-003"], caught_by=["confirmation-ref.other-operation"],
         era="modern")
def reference_not_bound_to_target(seams: Seams) -> None:
    """A reference is checked for its signature, expiry, window, capability and id, but not its target or digest."""
    changed_gate(seams, "reference", _ReferenceUnboundToTarget)


class _RunsUnconfirmable(_Wrapping[ConfirmationGate]):
    """Runs a call that carries no reference and whose client cannot be asked, instead of refusing it."""

    async def approve(self, call: GateCall) -> Approval:
        if CONFIRMATION_REF_META_KEY not in call.meta and not call.can_elicit():
            return time.time()
        return await self.inner.approve(call)


@variant("reference-missing-runs-unconfirmed", breaks=["EMC-GATE-008", "EMC-HP-067"],
         caught_by=["confirmation-ref.missing"], era="legacy")
def reference_missing_runs_unconfirmed(seams: Seams) -> None:
    """A gated call with no reference, from a client that cannot be asked either, runs unconfirmed."""
    seams.port("gates", _RunsUnconfirmable)


@variant("reference-ignored-server-asks", breaks=["EMC-HP-061"], caught_by=["confirmation-ref.approval-runs"],
         era="legacy")
def reference_ignored_server_asks(seams: Seams) -> None:
    """A carried reference is ignored: the server asks the client by elicitation anyway."""
    seams.port("gates", lambda gates: gates.asking)


def _unchecked_signature(token: str, trusted: Mapping[str, TrustedHost], token_type: str) -> Any:
    """The claims of a reference whose signature fails or whose key is unknown, read unverified."""
    try:
        return signed_claims(token, trusted, token_type)
    except BindingRejected as rejected:
        unsigned = rejected.reason in ("bad_signature", "untrusted_key")
        if token_type != REFERENCE_TOKEN_TYPE or not unsigned:
            raise
        claims = jwt.decode(token, options={"verify_signature": False})
        return claims, TrustedHost(generate_host_key()[1], Everything(), Everything())


@variant("reference-signature-unchecked", breaks=["EMC-GATE-001", "EMC-HP-062"], caught_by=["confirmation-ref.forged"],
         era="modern")
def reference_signature_unchecked(seams: Seams) -> None:
    """A reference whose signature does not verify, or whose key is unknown, is read anyway."""
    changed_gate(seams, "reference", lambda inner: dataclasses.replace(inner, signed_claims=_unchecked_signature))


class _ReferenceJudgedAtApproval(_Wrapping[HostReferenceGate]):
    """Judges a reference at its own approval time, so its exp never passes."""

    async def approve(self, call: GateCall) -> float | None:
        try:
            approved_at = float(jwt.decode(_reference(call), options={"verify_signature": False})["approved_at"])
        except (jwt.PyJWTError, KeyError, TypeError, ValueError):
            return None
        verdict = self.inner.verdict(call, now=approved_at)
        if not verdict.approved or verdict.consume is None:
            return None
        if not await call.consume(verdict.consume):
            return None
        return verdict.approved_at


@variant("reference-expiry-unchecked", breaks=["EMC-GATE-004"], caught_by=["confirmation-ref.expired"], era="legacy")
def reference_expiry_unchecked(seams: Seams) -> None:
    """A reference is judged at its approval time, so its exp never passes."""
    changed_gate(seams, "reference", _ReferenceJudgedAtApproval)


class _PolicyGateUnbound(_Wrapping[HostReferenceGate]):
    """For capture and admission, any reference the host signed approves the call."""

    async def approve(self, call: GateCall) -> float | None:
        if call.tool not in (CAPTURE, ADMIT):
            return await self.inner.approve(call)
        token = _reference(call)
        if not isinstance(token, str):
            return None
        try:
            self.inner.signed_claims(token, self.inner.trusted_keys, REFERENCE_TOKEN_TYPE)
        except BindingRejected:
            return None
        return time.time()


@variant("reference-policy-gate-unbound", breaks=["EMC-GATE-002"], caught_by=["confirmation-ref.policy-gated"],
         era="modern")
def reference_policy_gate_unbound(seams: Seams) -> None:
    """For policy-gated capture and admission any signed reference of the host passes, whatever call it names."""
    changed_gate(seams, "reference", _PolicyGateUnbound)


@variant("reference-ttl-ceiling-ignored", breaks=["EMC-GATE-004", "EMC-HP-063"],
         caught_by=["confirmation-ref.ttl-ceiling"], era="legacy")
def reference_ttl_ceiling_ignored(seams: Seams) -> None:
    """A reference is honoured until its exp however far after the approval the host put it."""
    unbounded = 10**9
    changed_gate(seams, "reference", lambda inner: dataclasses.replace(inner, ceiling=unbounded, ttl_seconds=unbounded))
