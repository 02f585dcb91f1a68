"""The host binding and the confirmation gate, as spec/host-profile.md pins them.

The reference server verifies what the conformance harness mints as a test
host, so both sides share this module. Bounds come from spec/limits.json and
schemas from schemas/data/, both through the loader; nothing here restates them.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import re
import secrets
import time
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from typing import Any, Literal

import jwt
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from mcp_types.version import is_version_at_least

from engram_mcp.contract._canonical import candidate_id, canonical_bytes, profile_digest
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


_claims_valid = _checker("binding-claims")
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


# -- keys ------------------------------------------------------------------


def generate_host_key() -> tuple[Ed25519PrivateKey, Ed25519PublicKey]:
    private = Ed25519PrivateKey.generate()
    return private, private.public_key()


def private_key_pem(key: Ed25519PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def public_key_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def load_private_key(pem: bytes) -> Ed25519PrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError("not an Ed25519 private key")
    return key


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    key = serialization.load_pem_public_key(pem)
    if not isinstance(key, Ed25519PublicKey):
        raise ValueError("not an Ed25519 public key")
    return key


# -- binding ---------------------------------------------------------------


def mint_binding(
    private_key: Ed25519PrivateKey,
    kid: str,
    *,
    audience: str,
    issuer: str,
    tenant: str,
    workspace: str,
    principal: str,
    agent_id: str,
    session: str,
    purpose_ref: str,
    lifetime: int = 60,
    now: float | None = None,
    header: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> str:
    """A binding as a host mints it, with a fresh audit_id and no deadline unless ``overrides`` sets them.

    ``overrides`` replace claims (None drops one) so tests can forge.
    """
    issued = int(time.time() if now is None else now)
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "iat": issued,
        "exp": issued + lifetime,
        "jti": secrets.token_urlsafe(16),
        "tenant": tenant,
        "workspace": workspace,
        "principal": principal,
        "agent_id": agent_id,
        "session": session,
        "purpose_ref": purpose_ref,
        "audit_id": new_audit_id(),
    }
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None}
    headers = {"kid": kid, "typ": BINDING_TOKEN_TYPE, **(header or {})}
    return jwt.encode(claims, private_key, algorithm=BINDING_ALGORITHM, headers=headers)


def _signed_claims(
    token: str, trusted_keys: Mapping[str, TrustedHost], token_type: str
) -> tuple[dict[str, Any], TrustedHost]:
    """The claims of a compact JWS of this type signed by a trusted host key, or BindingRejected.

    Bindings and confirmation references share this header rule; ``typ`` keeps one from passing for the other.
    """
    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise BindingRejected("malformed") from None
    if header.get("alg") != BINDING_ALGORITHM:
        raise BindingRejected("bad_algorithm")
    if header.get("typ") != token_type:
        raise BindingRejected("wrong_type")
    if set(header) != _BINDING_HEADER:
        raise BindingRejected("malformed")
    host = trusted_keys.get(header["kid"]) if isinstance(header["kid"], str) else None
    if not isinstance(host, TrustedHost):
        raise BindingRejected("untrusted_key")

    try:
        # Only the signature is PyJWT's job: the callers' claim checks use the
        # profile's limits and the caller's clock, and name their own reasons.
        claims = jwt.decode(
            token,
            host.public_key,
            algorithms=[BINDING_ALGORITHM],
            options={
                "verify_signature": True,
                "verify_exp": False,
                "verify_nbf": False,
                "verify_iat": False,
                "verify_aud": False,
                "verify_iss": False,
                "verify_sub": False,
                "verify_jti": False,
            },
        )
    except jwt.InvalidSignatureError:
        raise BindingRejected("bad_signature") from None
    except jwt.PyJWTError:
        raise BindingRejected("malformed") from None
    if not _all_finite(claims):
        raise BindingRejected("bad_claims")
    return claims, host


def verify_binding(
    token: str | None,
    trusted_keys: Mapping[str, TrustedHost],
    *,
    audience: str,
    now: float | None = None,
) -> Binding:
    """The verified binding, or BindingRejected. Checks run cheapest and least trusting first."""
    if token is None or token == "":
        raise BindingRejected("missing")
    if not isinstance(token, str):
        raise BindingRejected("malformed")
    claims, host = _signed_claims(token, trusted_keys, BINDING_TOKEN_TYPE)

    if not _claims_valid(claims) or claims["exp"] <= claims["iat"]:
        raise BindingRejected("bad_claims")
    untrusted = _trusted_for(host, claims["iss"], claims["tenant"], claims["workspace"])
    if untrusted is not None and untrusted != "scope_not_served":
        raise BindingRejected(untrusted)
    if claims["aud"] != audience:
        raise BindingRejected("wrong_audience")
    if claims["exp"] - claims["iat"] > BINDING_MAX_LIFETIME:
        raise BindingRejected("too_long_lived")
    clock = time.time() if now is None else now
    if clock >= claims["exp"] + BINDING_CLOCK_SKEW:
        raise BindingRejected("expired")
    if max(claims["iat"], claims.get("nbf", 0)) > clock + BINDING_CLOCK_SKEW:
        raise BindingRejected("not_yet_valid")
    if untrusted is not None:
        raise BindingRejected("scope_not_served")

    return Binding(
        tenant=claims["tenant"],
        workspace=claims["workspace"],
        principal=claims["principal"],
        agent_id=claims["agent_id"],
        session=claims["session"],
        purpose_ref=claims["purpose_ref"],
        issuer=claims["iss"],
        audience=claims["aud"],
        issued_at=claims["iat"],
        expires_at=claims["exp"],
        token_id=claims["jti"],
        audit_id=claims.get("audit_id"),
        deadline=claims.get("deadline"),
    )


def new_audit_id() -> str:
    """An audit id as a host SHOULD mint one: fresh per call, never derived from the call's content."""
    return "audit_" + secrets.token_hex(16)


def deadline_passed(binding: Binding, now: float | None = None) -> bool:
    """Whether the call's host deadline has passed on this clock (no deadline: never).

    No skew is added: a deadline is the host's instant, and the margins for
    clocks that disagree are the host's to leave (spec/host-profile.md §1.7).
    """
    return binding.deadline is not None and (time.time() if now is None else now) >= binding.deadline


# -- digests and ids bound to the binding ----------------------------------


def operation_target(tool: str, arguments: Mapping[str, Any]) -> str | None:
    """The value of the tool's target argument (spec/tools.json), or None."""
    name = _contract.tools[tool].target
    return None if name is None else arguments.get(name)


def _scoped(kind: str, tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding) -> str:
    # Arguments reach here already valid (host profile, order of checks), so
    # canonical JSON never meets an unsafe integer or a lone surrogate.
    return profile_digest(
        kind,
        {
            "capability": tool,
            "target": target,
            "arguments": dict(arguments),
            "principal": binding.principal,
            "tenant": binding.tenant,
            "workspace": binding.workspace,
        },
    )


def operation_digest(tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding) -> str:
    """What a human approves: this tool, on this target, with exactly these arguments, for this principal."""
    return _scoped("operation", tool, target, arguments, binding)


def idempotency_intent(tool: str, target: str | None, arguments: Mapping[str, Any], binding: Binding) -> str:
    """The hash a principal-scoped idempotency key is reserved against (the key itself left out)."""
    rest = {k: v for k, v in arguments.items() if k != "idempotency_key"}
    return _scoped("idempotency-intent", tool, target, rest, binding)


def scope_ref(binding: Binding) -> str:
    """The engine scope_ref this layer writes into every captured payload."""
    return profile_digest("scope", {"tenant": binding.tenant, "workspace": binding.workspace})


def capture_source_ref(binding: Binding) -> str:
    return profile_digest(
        "capture-source",
        {"tenant": binding.tenant, "workspace": binding.workspace, "principal": binding.principal},
    )


def capture_candidate_id(binding: Binding, idempotency_key: str) -> str:
    """The candidate_id a capture gets: the upstream identity, with the source scoping keys per principal."""
    return candidate_id(capture_source_ref(binding), CAPTURE_SEQUENCE, idempotency_key)


def journal_event_id(binding: Binding, idempotency_key: str) -> str:
    """The journal event id of a mutation: never the raw key, which upstream journals treat as global."""
    value = {
        "tenant": binding.tenant,
        "workspace": binding.workspace,
        "principal": binding.principal,
        "idempotency_key": idempotency_key,
    }
    return "evt_" + profile_digest("journal-event-id", value).removeprefix("sha256:")


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


# -- host-reference confirmation ----------------------------------------------
#
# The host obtains the human approval itself and sends, with the gated call, a
# signed reference naming exactly the approved operation. The server judges the
# reference alone; it never asks the client anything in this mode.

ConfirmationMode = Literal["host-reference", "server-initiated"]
CONFIRMATION_MODES: tuple[ConfirmationMode, ...] = ("host-reference", "server-initiated")


def mint_confirmation_reference(
    private_key: Ed25519PrivateKey,
    kid: str,
    *,
    audience: str,
    issuer: str,
    tool: str,
    arguments: Mapping[str, Any],
    tenant: str,
    workspace: str,
    principal: str,
    approved_at: float | None = None,
    lifetime: float = 60,
    header: Mapping[str, Any] | None = None,
    **overrides: Any,
) -> str:
    """A reference as a host mints it after an approval; ``overrides`` replace claims (None drops one)."""
    approved = time.time() if approved_at is None else approved_at
    target = operation_target(tool, arguments)
    caller = _Caller(tenant=tenant, workspace=workspace, principal=principal)
    claims: dict[str, Any] = {
        "iss": issuer,
        "aud": audience,
        "jti": secrets.token_urlsafe(16),
        "capability": tool,
        "target": target,
        "operation_digest": _scoped("operation", tool, target, arguments, caller),  # type: ignore[arg-type]
        "approved_at": round(approved, 3),
        "exp": round(approved + lifetime, 3),
    }
    claims.update(overrides)
    claims = {k: v for k, v in claims.items() if v is not None or k == "target"}
    headers = {"kid": kid, "typ": REFERENCE_TOKEN_TYPE, **(header or {})}
    return jwt.encode(claims, private_key, algorithm=BINDING_ALGORITHM, headers=headers)


@dataclass(frozen=True)
class _Caller:
    """The three binding values an operation digest covers, for a host that holds no Binding object."""

    tenant: str
    workspace: str
    principal: str


@dataclass(frozen=True)
class ReferenceVerdict:
    """The judgement of a confirmation reference. ``consume`` is the single-use id to record durably before acting."""

    approved: bool
    reason: str | None  # a log token when not approved
    consume: str | None
    approved_at: float | None  # the host's approval time: the execution window runs from it


def _refused(reason: str) -> ReferenceVerdict:
    return ReferenceVerdict(False, reason, None, None)


def check_reference(  # noqa: PLR0911 - one refusal per reason, in the order they are judged
    token: Any,
    trusted_keys: Mapping[str, TrustedHost],
    *,
    audience: str,
    tool: str,
    target: str | None,
    arguments: Mapping[str, Any],
    binding: Binding,
    ttl: float = CONFIRMATION_TTL_MAX,
    now: float | None = None,
) -> ReferenceVerdict:
    """Judge the reference a gated call carries. Fails closed on every branch; the window is the caller's to check.

    ``ttl`` is the server's ceiling on exp - approved_at (at most confirmation.ttl.max).
    """
    if not isinstance(token, str) or not token:
        return _refused("malformed")
    try:
        claims, host = _signed_claims(token, trusted_keys, REFERENCE_TOKEN_TYPE)
    except BindingRejected as rejected:
        return _refused(rejected.reason)
    if not _reference_valid(claims) or claims["exp"] <= claims["approved_at"]:
        return _refused("bad_claims")
    untrusted = _trusted_for(host, claims["iss"], binding.tenant, binding.workspace)
    if untrusted is not None:
        return _refused(untrusted)
    if claims["aud"] != audience:
        return _refused("wrong_audience")
    # In whole milliseconds: NumericDates with fractions must not fail the ceiling on a float rounding.
    if _ms(claims["exp"]) - _ms(claims["approved_at"]) > _ms(min(ttl, CONFIRMATION_TTL_MAX)):
        return _refused("too_long_lived")
    clock = time.time() if now is None else now
    if clock >= claims["exp"] + BINDING_CLOCK_SKEW:
        return _refused("expired")
    if claims["approved_at"] > clock + BINDING_CLOCK_SKEW:
        return _refused("not_yet_valid")
    if claims["capability"] != tool:
        return _refused("capability_mismatch")
    if claims["target"] != target:
        return _refused("target_mismatch")
    if claims["operation_digest"] != operation_digest(tool, target, arguments, binding):
        return _refused("operation_mismatch")
    return ReferenceVerdict(True, None, reference_consume_id(host_kid(token), claims["jti"]),
                            float(claims["approved_at"]))


def reference_consume_id(kid: str, jti: str) -> str:
    """The single-use id of a reference: namespaced by key id, since each host picks its own jti values.

    A digest of both, canonically encoded, so no kid or jti (':' included) can forge another pair's id;
    the prefix keeps it apart from a sealed state's nonce.
    """
    return "ref:" + profile_digest("confirmation-reference-id", {"kid": kid, "jti": jti}).removeprefix("sha256:")


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


def host_kid(token: str) -> str:
    """The ``kid`` of a token whose header was already verified."""
    return str(jwt.get_unverified_header(token)["kid"])


def approval_too_old(approved_at: float, *, now: float | None = None) -> bool:
    """Whether an operation starting now is later than confirmation.execute_within after its approval."""
    return (time.time() if now is None else now) - approved_at > CONFIRMATION_EXECUTE_WITHIN
