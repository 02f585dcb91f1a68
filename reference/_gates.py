"""Confirmation gates: how a gated call obtains its human approval, as a port of the server.

A gate answers a ``GateCall`` with the approval time, None when the call is not approved, or (in
the 2026-07-28 era) the request for input the client must answer first. The configured gate picks
between the two modes of the host wiring: a host reference carried with the call is judged alone,
never by asking (EMC-HP-061); otherwise the server asks the client by form elicitation. A call that
can be confirmed in neither way is refused with the constant -32603.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from engram_mcp.contract import load
from engram_mcp.contract.binding import (
    CONFIRMATION_INPUT_KEY,
    CONFIRMATION_REF_META_KEY,
    CONFIRMATION_REQUESTED_SCHEMA,
    CONFIRMATION_TTL_MAX,
    Binding,
    ConfirmationSealer,
    ConfirmationState,
    ReferenceVerdict,
    SignedClaims,
    TrustedHost,
    check_reference,
    check_retry,
    confirmation_message,
    is_approval,
    operation_target,
    signed_claims,
    supports_form_elicitation,
)

log = logging.getLogger("engram_mcp.reference")

_UNTRUSTED = load().protocol_errors["trusted_context_unavailable"]

Approval = float | types.InputRequiredResult | None  # the approval time, a request for input, or refused


def untrusted() -> MCPError:
    """The constant -32603: the host context the call needs (here, a way to confirm it) is unavailable."""
    return MCPError(code=_UNTRUSTED.jsonrpc_code, message=_UNTRUSTED.message)


@dataclass(frozen=True)
class GateCall:
    """A gated call, as a gate sees it. ``consume`` spends a single-use id durably (False: already spent)."""

    request: Any  # the SDK's ServerRequestContext: meta, session, protocol era
    params: types.CallToolRequestParams
    tool: str
    binding: Binding
    arguments: dict[str, Any]
    ttl: int  # the scope's confirmation TTL, in seconds
    consume: Callable[[str], Awaitable[bool]]

    @property
    def meta(self) -> Mapping[str, Any]:
        return self.request.meta or {}

    @property
    def modern(self) -> bool:
        return self.request.protocol_version in MODERN_PROTOCOL_VERSIONS

    @property
    def target(self) -> str | None:
        return operation_target(self.tool, self.arguments)

    def can_elicit(self) -> bool:
        """Whether the client declared form elicitation."""
        capabilities = self.request.session.client_capabilities
        declared = capabilities.model_dump(by_alias=True, exclude_none=True) if capabilities is not None else None
        return supports_form_elicitation(declared, self.request.protocol_version)

    def input_responses(self) -> dict[str, Any]:
        return {k: v.model_dump(by_alias=True, exclude_none=True) if hasattr(v, "model_dump") else v
                for k, v in (self.params.input_responses or {}).items()}


class ConfirmationGate(Protocol):
    async def approve(self, call: GateCall) -> Approval: ...


@dataclass(frozen=True)
class HostReferenceGate:
    """The host obtained the approval and signed a reference naming the call: judged alone, its id spent first."""

    trusted_keys: Mapping[str, TrustedHost]
    audience: str
    ttl_seconds: float  # the configured ceiling on a reference's exp - approved_at
    ceiling: float = CONFIRMATION_TTL_MAX  # the contract's, above any configuration
    signed_claims: SignedClaims = signed_claims

    def verdict(self, call: GateCall, *, now: float | None = None) -> ReferenceVerdict:
        return check_reference(call.meta.get(CONFIRMATION_REF_META_KEY), self.trusted_keys, audience=self.audience,
                               tool=call.tool, target=call.target, arguments=call.arguments, binding=call.binding,
                               ttl=self.ttl_seconds, now=now, ceiling=self.ceiling, signed_claims=self.signed_claims)

    async def approve(self, call: GateCall) -> float | None:
        verdict = self.verdict(call)
        if not verdict.approved or verdict.consume is None:
            log.info("confirmation reference refused: %s", verdict.reason)
            return None
        if not await call.consume(verdict.consume):
            log.info("confirmation reference refused: replayed")
            return None
        return verdict.approved_at


@dataclass(frozen=True)
class ElicitationGate:
    """The server asks the client: an elicitation request in the legacy era, a request for input in the modern."""

    sealer: ConfirmationSealer

    async def approve(self, call: GateCall) -> Approval:
        if not call.can_elicit() or not (call.modern or call.request.session.can_send_request):
            raise untrusted()  # the host cannot carry a confirmation at all
        if not call.modern:
            return await self.elicit(call)
        if call.params.request_state is None and call.params.input_responses is None:
            return self.ask(call)
        return await self.judge_answer(call)

    def ask(self, call: GateCall) -> types.InputRequiredResult:
        """The modern era's first answer: the question, with the sealed state a retry must bring back."""
        state = ConfirmationState.mint(call.tool, call.target, call.arguments, call.binding, ttl=call.ttl)
        question = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=confirmation_message(call.tool), requested_schema=CONFIRMATION_REQUESTED_SCHEMA))
        return types.InputRequiredResult(input_requests={CONFIRMATION_INPUT_KEY: question},
                                         request_state=self.sealer.seal_state(state))

    async def judge_answer(self, call: GateCall, *, now: float | None = None) -> float | None:
        """A modern retry: its state must name this very call, and is spent whatever the answer."""
        verdict = check_retry(self.sealer, request_state=call.params.request_state,
                              input_responses=call.input_responses(), tool=call.tool, target=call.target,
                              arguments=call.arguments, binding=call.binding, now=now)
        if verdict.consume is not None and not await call.consume(verdict.consume):
            return None  # a replayed state
        return time.time() if verdict.approved else None

    async def elicit(self, call: GateCall) -> float | None:
        """The legacy era: an elicitation request on the open session, answered within the TTL."""
        try:
            with anyio.fail_after(call.ttl):
                answer = await call.request.session.elicit_form(
                    confirmation_message(call.tool), CONFIRMATION_REQUESTED_SCHEMA,
                    related_request_id=call.request.request_id)
        except Exception:  # timeout, an error reply, a closed channel: all refuse
            return None
        return time.time() if is_approval(answer) else None


@dataclass(frozen=True)
class ConfiguredGates:
    """The configured modes: a carried reference is judged by ``reference``, else ``asking`` asks."""

    modes: frozenset[str]
    reference: ConfirmationGate
    asking: ConfirmationGate

    async def approve(self, call: GateCall) -> Approval:
        if "host-reference" in self.modes and CONFIRMATION_REF_META_KEY in call.meta:
            return await self.reference.approve(call)
        if "server-initiated" in self.modes:
            return await self.asking.approve(call)
        raise untrusted()  # the contract's missing confirmation reference
