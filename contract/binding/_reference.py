"""Host-reference confirmation: a signed reference naming the one operation a human approved."""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_mcp.contract._canonical import profile_digest
from engram_mcp.contract.binding._ids import _scoped, operation_digest, operation_target
from engram_mcp.contract.binding._model import (
    BINDING_ALGORITHM,
    BINDING_CLOCK_SKEW,
    CONFIRMATION_EXECUTE_WITHIN,
    CONFIRMATION_TTL_MAX,
    REFERENCE_TOKEN_TYPE,
    Binding,
    BindingRejected,
    TrustedHost,
    _reference_valid,
    _trusted_for,
)
from engram_mcp.contract.binding._token import SignedClaims, _signed_claims

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
        "operation_digest": _scoped("operation", tool, target, arguments, caller),  # type: ignore[arg-type]  # reads only the three fields _Caller has
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
    ceiling: float = CONFIRMATION_TTL_MAX,
    signed_claims: SignedClaims | None = None,
) -> ReferenceVerdict:
    """Judge the reference a gated call carries. Fails closed on every branch; the window is the caller's to check.

    ``ttl`` is the server's ceiling on exp - approved_at, never above ``ceiling`` (confirmation.ttl.max);
    ``signed_claims`` reads the token's claims and its host (the signature check: ``signed_claims``).
    """
    if not isinstance(token, str) or not token:
        return _refused("malformed")
    try:
        claims, host = (signed_claims or _signed_claims)(token, trusted_keys, REFERENCE_TOKEN_TYPE)
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
    if _ms(claims["exp"]) - _ms(claims["approved_at"]) > _ms(min(ttl, ceiling)):
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
