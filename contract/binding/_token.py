"""The host binding: a compact JWS the host signs for each call, minted and verified."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_mcp.contract.binding._model import (
    _BINDING_HEADER,
    BINDING_ALGORITHM,
    BINDING_CLOCK_SKEW,
    BINDING_MAX_LIFETIME,
    BINDING_TOKEN_TYPE,
    Binding,
    BindingRejected,
    TrustedHost,
    _all_finite,
    _trusted_for,
    binding_claims_valid,
)

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


SignedClaims = Callable[[str, Mapping[str, TrustedHost], str], tuple[dict[str, Any], TrustedHost]]
signed_claims: SignedClaims = _signed_claims  # public: a port that reads tokens its own way starts from it


def verify_binding(
    token: str | None,
    trusted_keys: Mapping[str, TrustedHost],
    *,
    audience: str,
    now: float | None = None,
    max_lifetime: float = BINDING_MAX_LIFETIME,
    claims_valid: Callable[[Any], bool] = binding_claims_valid,
    signed: SignedClaims = _signed_claims,
) -> Binding:
    """The verified binding, or BindingRejected. Checks run cheapest and least trusting first.

    ``max_lifetime`` (at most binding.max_lifetime) and ``claims_valid`` are the server's to narrow; ``signed``
    checks the header and the signature (a server may remember the tokens it has verified: ``signed_claims``).
    """
    if token is None or token == "":
        raise BindingRejected("missing")
    if not isinstance(token, str):
        raise BindingRejected("malformed")
    claims, host = signed(token, trusted_keys, BINDING_TOKEN_TYPE)

    if not claims_valid(claims) or claims["exp"] <= claims["iat"]:
        raise BindingRejected("bad_claims")
    untrusted = _trusted_for(host, claims["iss"], claims["tenant"], claims["workspace"])
    if untrusted is not None and untrusted != "scope_not_served":
        raise BindingRejected(untrusted)
    if claims["aud"] != audience:
        raise BindingRejected("wrong_audience")
    if claims["exp"] - claims["iat"] > max_lifetime:
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
    clocks that disagree are the host's to leave (spec/host-wiring.md §1.7).
    """
    return binding.deadline is not None and (time.time() if now is None else now) >= binding.deadline
