"""Constants, limits, claim checkers and the value types of the host binding and its confirmations."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from engram_mcp.contract._errors import ContractError
from engram_mcp.contract._loader import load

HOST_BINDING_META_KEY = "sentropic.engram.memory/host-binding"
CONFIRMATION_REF_META_KEY = "sentropic.engram.memory/confirmation-ref"
CONFIRMATION_INPUT_KEY = "sentropic.engram.memory/confirmation"
CLIENT_CAPABILITIES_META_KEY = "io.modelcontextprotocol/clientCapabilities"

BINDING_ALGORITHM = "EdDSA"
BINDING_TOKEN_TYPE = "engram-host-binding+jwt"  # explicit typing: no other JWT passes for a binding
REFERENCE_TOKEN_TYPE = "engram-confirmation+jwt"  # never accepted as a binding, and a binding never as this
_BINDING_HEADER = frozenset({"alg", "kid", "typ"})  # jwk, jku, x5u, x5c, crit... are refused, never followed

REQUEST_STATE_AAD = b"engram-memory-mcp/request-state/v1"
CAPTURE_SEQUENCE = "1"  # one candidate per (source, key): the key alone makes it unique
ELICITATION_SINCE = "2025-06-18"  # first protocol revision with elicitation/create

_contract = load()
BINDING_MAX_LIFETIME = _contract.limit("binding.max_lifetime")
BINDING_CLOCK_SKEW = _contract.limit("binding.clock_skew")
CONFIRMATION_TTL_MAX = _contract.limit("confirmation.ttl.max")
CONFIRMATION_EXECUTE_WITHIN = _contract.limit("confirmation.execute_within")



def _checker(schema: str) -> Callable[[Any], bool]:
    """Whether a value matches one of the data schemas: the compiled check, the Python validator when it says no."""
    fast, full = _contract.validity(_contract.data_schema(schema)), _contract.validator(_contract.data_schema(schema))
    return lambda value: fast(value) or full.is_valid(value)


binding_claims_valid = _checker("binding-claims")  # the claims' schema; a host binding port may pass its own
_state_valid = _checker("request-state")
_reference_valid = _checker("confirmation-reference")

# The requestedSchema of every confirmation, in both eras: the data file minus
# its $id, which names the file and means nothing to a client.
CONFIRMATION_REQUESTED_SCHEMA: dict[str, Any] = {
    k: v for k, v in _contract.data_schema("confirmation-form").items() if k != "$id"
}

# Constant per tool: they name the operation and the kind of target, and never
# carry argument text, ids or binding values (nothing an agent could inject).
CONFIRMATION_MESSAGES: Mapping[str, str] = {
    "engram_memory_capture": (
        "Approve storing a new memory candidate? It stays pending until the admission policy decides."
    ),
    "engram_memory_request_admission": (
        "Approve asking the admission policy to decide on a pending memory candidate?"
    ),
    "engram_memory_withdraw": (
        "Approve withdrawing a pending memory candidate? Its key is destroyed; this cannot be undone."
    ),
    "engram_memory_forget": (
        "Approve permanently forgetting an admitted memory record? It will never be returned again;"
        " this cannot be undone."
    ),
}

BindingReason = Literal[
    "missing",
    "malformed",
    "bad_algorithm",
    "wrong_type",
    "untrusted_key",
    "bad_signature",
    "bad_claims",
    "wrong_issuer",
    "wrong_audience",
    "expired",
    "not_yet_valid",
    "too_long_lived",
    "scope_not_served",
    "tenant_not_trusted",
]


class BindingRejected(ContractError):
    """The binding cannot be trusted. ``reason`` is for server logs, never for clients."""

    def __init__(self, reason: BindingReason) -> None:
        super().__init__(reason)
        self.reason: BindingReason = reason


class StateRejected(ContractError):
    """A sealed token cannot be opened: forged, tampered, sealed under another key or malformed."""


@dataclass(frozen=True)
class Binding:
    tenant: str
    workspace: str
    principal: str
    agent_id: str
    session: str
    purpose_ref: str
    issuer: str
    audience: str
    issued_at: int
    expires_at: int
    token_id: str
    audit_id: str | None = None  # the host's id for this call; tools/call requires it (EMC-HP-053)
    deadline: float | None = None  # NumericDate, fractional seconds allowed (EMC-HP-055)


@dataclass(frozen=True)
class TrustedHost:
    """A host key from the server's configuration, with the issuers and tenants it is trusted for.

    Both are required (EMC-HP-008): a key trusted for "anything" does not exist.
    ``scopes`` narrows further, to (tenant, workspace) pairs.
    """

    public_key: Ed25519PublicKey
    issuers: frozenset[str]
    tenants: frozenset[str]
    scopes: frozenset[tuple[str, str]] | None = None  # (tenant, workspace) pairs; None: any scope in its tenants


def _trusted_for(host: TrustedHost, iss: Any, tenant: str, workspace: str) -> BindingReason | None:
    """Why this key may not speak for (iss, tenant, workspace), or None when it may.

    Bindings and confirmation references both pass here, so a reference's key
    answers for the issuer it names and for the tenant of the binding it approves.
    """
    if iss not in host.issuers:
        return "wrong_issuer"
    if tenant not in host.tenants:
        return "tenant_not_trusted"
    if host.scopes is not None and (tenant, workspace) not in host.scopes:
        return "scope_not_served"
    return None


def _all_finite(value: Any) -> bool:
    """Whether no number anywhere in a decoded claim set is NaN or infinite (JSON parsers let them through)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_all_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_all_finite(v) for v in value)
    return True
