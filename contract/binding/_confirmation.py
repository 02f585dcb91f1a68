"""Server-initiated confirmation: the form, the sealed request state of the modern era, and its check."""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import secrets
import time
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp_types.version import is_version_at_least

from engram_mcp.contract._canonical import canonical_bytes
from engram_mcp.contract.binding._ids import operation_digest
from engram_mcp.contract.binding._model import (
    CONFIRMATION_INPUT_KEY,
    CONFIRMATION_MESSAGES,
    CONFIRMATION_TTL_MAX,
    ELICITATION_SINCE,
    REQUEST_STATE_AAD,
    Binding,
    StateRejected,
    _contract,
    _state_valid,
)

# -- confirmation ----------------------------------------------------------


def confirmation_required(tool: str, policy_tools: AbstractSet[str]) -> bool:
    """Whether a call needs a human confirmation; ``policy_tools`` is the bound scope's configured set."""
    mode = _contract.tools[tool].confirmation
    return mode == "always" or (mode == "policy" and tool in policy_tools)


def confirmation_message(tool: str) -> str:
    return CONFIRMATION_MESSAGES[tool]


def supports_form_elicitation(capabilities: Mapping[str, Any] | None, protocol_version: str) -> bool:
    """Whether a client declared form-mode elicitation (an empty elicitation object means form)."""
    if not is_version_at_least(protocol_version, ELICITATION_SINCE) or not isinstance(capabilities, Mapping):
        return False
    elicitation = capabilities.get("elicitation")
    if not isinstance(elicitation, Mapping):
        return False
    return isinstance(elicitation.get("form"), Mapping) or not ({"form", "url"} & set(elicitation))


def is_approval(response: Any) -> bool:
    """True only for an accept whose content is exactly {"confirm": true}."""
    if isinstance(response, Mapping):
        action, content = response.get("action"), response.get("content")
    else:
        action, content = getattr(response, "action", None), getattr(response, "content", None)
    return (
        action == "accept"
        and isinstance(content, Mapping)
        and set(content) == {"confirm"}
        and content["confirm"] is True  # not 1, not "true"
    )


@dataclass(frozen=True)
class ConfirmationState:
    capability: str
    target: str | None
    operation_digest: str
    principal: str
    tenant: str
    workspace: str
    session: str
    issued_at: int
    expires_at: int
    nonce: str

    @classmethod
    def mint(
        cls,
        tool: str,
        target: str | None,
        arguments: Mapping[str, Any],
        binding: Binding,
        *,
        ttl: int = CONFIRMATION_TTL_MAX,
        now: float | None = None,
    ) -> ConfirmationState:
        if not 1 <= ttl <= CONFIRMATION_TTL_MAX:
            raise ValueError("confirmation TTL outside 1..confirmation.ttl.max")
        issued = int(time.time() if now is None else now)
        return cls(
            capability=tool,
            target=target,
            operation_digest=operation_digest(tool, target, arguments, binding),
            principal=binding.principal,
            tenant=binding.tenant,
            workspace=binding.workspace,
            session=binding.session,
            issued_at=issued,
            expires_at=issued + ttl,
            nonce=secrets.token_urlsafe(16),
        )

    def to_claims(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_claims(cls, claims: Any) -> ConfirmationState:
        if not _state_valid(claims):
            raise StateRejected("state claims do not match request-state.schema.json")
        if not 1 <= claims["expires_at"] - claims["issued_at"] <= CONFIRMATION_TTL_MAX:
            raise StateRejected("state lifetime outside 1..confirmation.ttl.max")
        return cls(**claims)

    def mismatch(
        self, tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding, *, now: float | None = None
    ) -> str | None:
        """Why this state cannot confirm this call (a log token), or None when it can."""
        if (time.time() if now is None else now) >= self.expires_at:
            return "expired"
        expected = {
            "capability": tool,
            "target": target,
            "principal": binding.principal,
            "tenant": binding.tenant,
            "workspace": binding.workspace,
            "session": binding.session,
        }
        for name, value in expected.items():
            if getattr(self, name) != value:
                return f"{name}_mismatch"
        if self.operation_digest != operation_digest(tool, target, arguments, binding):
            return "operation_mismatch"
        return None


_B64URL = re.compile(r"[A-Za-z0-9_-]+\Z")


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64url(text: str) -> bytes:
    """Strict unpadded base64url: one spelling per byte string, so a token cannot be re-encoded."""
    if not isinstance(text, str) or not _B64URL.match(text):
        raise StateRejected("not base64url")
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except binascii.Error:
        raise StateRejected("not base64url") from None
    if _b64url(data) != text:
        raise StateRejected("not canonical base64url")
    return data


class Sealer:
    """AES-256-GCM over canonical JSON; the associated data names what the token is for."""

    NONCE_BYTES = 12

    def __init__(self, key: bytes, *, associated_data: bytes) -> None:
        if len(key) != 32:
            raise ValueError("an AES-256 key is 32 bytes")
        self._aead = AESGCM(key)
        self._aad = associated_data

    def seal(self, claims: Mapping[str, Any]) -> str:
        nonce = os.urandom(self.NONCE_BYTES)
        return _b64url(nonce + self._aead.encrypt(nonce, canonical_bytes(dict(claims)), self._aad))

    def open(self, token: str) -> dict[str, Any]:
        raw = _unb64url(token)
        if len(raw) < self.NONCE_BYTES + 16:
            raise StateRejected("too short")
        try:
            plain = self._aead.decrypt(raw[: self.NONCE_BYTES], raw[self.NONCE_BYTES :], self._aad)
        except InvalidTag:
            raise StateRejected("does not authenticate") from None
        claims = json.loads(plain)
        if not isinstance(claims, dict):
            raise StateRejected("not an object")
        return claims


class ConfirmationSealer(Sealer):
    """Seals the request_state of a modern-era confirmation."""

    def __init__(self, key: bytes) -> None:
        super().__init__(key, associated_data=REQUEST_STATE_AAD)

    def seal_state(self, state: ConfirmationState) -> str:
        return self.seal(state.to_claims())

    def open_state(self, token: str) -> ConfirmationState:
        return ConfirmationState.from_claims(self.open(token))


@dataclass(frozen=True)
class GateVerdict:
    """The outcome of a modern-era retry. ``consume`` is the nonce to burn durably before acting, if any."""

    approved: bool
    reason: str | None  # a log token when not approved
    consume: str | None
    expires_at: int | None  # how long the consumed nonce must be remembered


def check_retry(
    sealer: ConfirmationSealer,
    *,
    request_state: str | None,
    input_responses: Mapping[str, Any] | None,
    tool: str,
    target: str | None,
    arguments: Mapping[str, Any],
    binding: Binding,
    now: float | None = None,
) -> GateVerdict:
    """Judge a retry that carries request_state and/or input_responses. Fails closed on every branch."""
    if request_state is None:
        return GateVerdict(False, "missing_state", None, None)
    try:
        state = sealer.open_state(request_state)
    except StateRejected:
        return GateVerdict(False, "unreadable_state", None, None)
    reason = state.mismatch(tool, target, arguments, binding, now=now)
    if reason is not None:
        return GateVerdict(False, reason, None, None)
    # From here the state belongs to this call: burn it whatever the answer, so
    # a declined confirmation cannot be answered again.
    answer = (input_responses or {}).get(CONFIRMATION_INPUT_KEY)
    if not is_approval(answer):
        return GateVerdict(False, "not_confirmed", state.nonce, state.expires_at)
    return GateVerdict(True, None, state.nonce, state.expires_at)
