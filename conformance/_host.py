"""How the harness acts as host: binding each call, and answering confirmations.

Both are Protocols. The default adapters follow spec/host-wiring.md (a signed
binding in ``_meta``, confirmation by form elicitation); a server wired
differently is certified by writing one adapter, not by forking the suite.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import jwt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from engram_mcp.conformance._profile import NEEDS_PROFILE, Profile, ProfileError, ScopeProfile
from engram_mcp.conformance._tracker import REFUSED_REFERENCE
from engram_mcp.conformance._words import spoken
from engram_mcp.contract import load
from engram_mcp.contract.binding import (
    BINDING_CLOCK_SKEW,
    CONFIRMATION_INPUT_KEY,
    CONFIRMATION_REF_META_KEY,
    CONFIRMATION_TTL_MAX,
    HOST_BINDING_META_KEY,
    confirmation_required,
    generate_host_key,
    load_private_key,
    mint_binding,
    mint_confirmation_reference,
    new_audit_id,
)

# Ways a binding can be broken; an adapter lists those it can produce.
Forgery = Literal["missing", "garbage", "expired", "not_yet_valid", "wrong_audience", "untrusted_key",
                  "too_long_lived", "alg_none", "extra_claim", "missing_claim", "missing_audit_id",
                  "foreign_tenant", "foreign_issuer"]
# Each forgery in the words a verdict uses: what the harness changed in the binding it sent.
FORGERY_WORDS: dict[str, str] = {
    "missing": "no binding at all", "garbage": "a binding that is no token at all",
    "expired": "an expired binding", "not_yet_valid": "a binding not yet valid",
    "wrong_audience": "a binding minted for another server's audience",
    "untrusted_key": "a binding signed by a key the server was never given",
    "too_long_lived": "a binding valid longer than binding.max_lifetime",
    "alg_none": "an unsigned binding (alg none)",
    "extra_claim": "a binding with a claim beyond the closed set (role)",
    "missing_claim": "a binding without the agent_id claim",
    "missing_audit_id": "a binding without the audit_id claim",
    "foreign_tenant": "a binding for a tenant the key is not trusted for",
    "foreign_issuer": "a binding in the name of an issuer the key is not trusted for",
}
Answer = Literal["accept", "decline", "cancel", "accept_false", "silence"]
# Ways a confirmation reference can be broken by the host itself; an adapter lists those it can produce.
ReferenceFlaw = Literal["expired", "too_long_lived", "over_declared_ttl", "forged_signature", "untrusted_key",
                        "binding_token"]


class HostBinding(Protocol):
    """Binds one call to a scope, a principal and a purpose."""

    forgeries: frozenset[str]

    def meta(self, scope: ScopeProfile, principal: str, *, purpose: str | None = None, session: str = "conformance",
             audit_id: str | None = None, deadline: float | None = None) -> dict[str, Any]:
        """The request ``_meta`` a trusted host sends: a fresh audit id unless one is given, and a deadline if given."""
        ...

    def audit_id_of(self, meta: Mapping[str, Any]) -> str | None:
        """The audit id a ``_meta`` this host made carries, as the envelope must echo it."""
        ...

    def forged(self, forgery: Forgery, scope: ScopeProfile, principal: str) -> dict[str, Any]:
        """The ``_meta`` of a host that must not be trusted."""
        ...


class Confirmer(Protocol):
    """Answers the server's request for a human confirmation, in either era."""

    def elicit_result(self, answer: Answer) -> dict[str, Any] | None:
        """The ElicitResult content for an answer; None means never answer."""
        ...

    def input_responses(self, answer: Answer) -> dict[str, Any]:
        """The 2026-07-28 retry's inputResponses for an answer."""
        ...


class ConfirmationReferences(Protocol):
    """The host-reference mode: the host has a human approve one operation, then vouches for it in ``_meta``."""

    flaws: frozenset[str]

    def approve(self, scope: ScopeProfile, principal: str, tool: str, arguments: dict[str, Any], *,
                approved_ago: float = 0.0, lifetime: float | None = None, jti: str | None = None) -> dict[str, Any]:
        """The ``_meta`` entries that confirm this call: an approval given ``approved_ago`` seconds ago.
        ``jti`` reuses an approval id (a host must never do so: a check of single use)."""
        ...

    def flawed(self, flaw: ReferenceFlaw, scope: ScopeProfile, principal: str, tool: str,
               arguments: dict[str, Any]) -> dict[str, Any]:
        """The ``_meta`` entries of a reference for this call that a server must refuse."""
        ...


@dataclass
class SignedMetaBinding:
    """The host wiring's binding: an EdDSA JWT under the host-binding ``_meta`` key."""

    key: Ed25519PrivateKey
    kid: str
    issuer: str
    audience: str
    purpose_ref: str
    lifetime: int = 60

    forgeries = frozenset({"missing", "garbage", "expired", "not_yet_valid", "wrong_audience", "untrusted_key",
                           "too_long_lived", "alg_none", "extra_claim", "missing_claim", "missing_audit_id",
                           "foreign_tenant", "foreign_issuer"})

    @classmethod
    def from_profile(cls, profile: Profile) -> SignedMetaBinding:
        binding = profile.binding
        try:
            key = load_private_key(Path(binding["private_key_file"]).read_bytes())
        except (KeyError, OSError, ValueError, TypeError):
            named, where = spoken(binding.get("private_key_file")), profile.path or "the profile"
            raise ProfileError(f"{where}: binding.private_key_file: {named} is not a readable PEM Ed25519 private "
                               "key") from None
        return cls(key=key, kid=binding["kid"], issuer=binding["issuer"],
                   audience=profile.audience, purpose_ref=profile.purpose_ref)

    def _token(self, scope: ScopeProfile, principal: str, *, purpose: str | None, session: str,
               key: Ed25519PrivateKey | None = None, **overrides: Any) -> str:
        claims: dict[str, Any] = {
            "audience": self.audience,
            "issuer": self.issuer,
            "tenant": scope.tenant,
            "workspace": scope.workspace,
            "principal": principal,
            "agent_id": "conformance-agent",
            "session": session,
            "purpose_ref": purpose or self.purpose_ref,
            "lifetime": self.lifetime,
        }
        renamed = {"aud": "audience"}  # mint_binding names the audience claim by keyword
        for name, value in overrides.items():
            claims[renamed.get(name, name)] = value
        return mint_binding(key or self.key, self.kid, **claims)

    def meta(self, scope: ScopeProfile, principal: str, *, purpose: str | None = None, session: str = "conformance",
             audit_id: str | None = None, deadline: float | None = None) -> dict[str, Any]:
        return {HOST_BINDING_META_KEY: self._token(scope, principal, purpose=purpose, session=session,
                                                   audit_id=audit_id or new_audit_id(), deadline=deadline)}

    def audit_id_of(self, meta: Mapping[str, Any]) -> str | None:
        token = meta.get(HOST_BINDING_META_KEY)
        try:
            claims = jwt.decode(token, options={"verify_signature": False}) if isinstance(token, str) else {}
        except jwt.PyJWTError:
            return None
        value = claims.get("audit_id")
        return value if isinstance(value, str) else None

    def forged(  # noqa: PLR0912 - one branch per forgery
        self, forgery: Forgery, scope: ScopeProfile, principal: str
    ) -> dict[str, Any]:
        now = int(time.time())
        if forgery == "missing":
            return {}
        if forgery == "garbage":
            token = "not-a-token"
        elif forgery == "expired":
            token = self._token(scope, principal, purpose=None, session="conformance", iat=now - 120, exp=now - 60)
        elif forgery == "not_yet_valid":
            token = self._token(scope, principal, purpose=None, session="conformance", iat=now + 600, exp=now + 660)
        elif forgery == "wrong_audience":
            token = self._token(scope, principal, purpose=None, session="conformance", aud=self.audience + "-other")
        elif forgery == "untrusted_key":
            token = self._token(scope, principal, purpose=None, session="conformance", key=generate_host_key()[0])
        elif forgery == "too_long_lived":
            token = self._token(scope, principal, purpose=None, session="conformance", exp=now + 24 * 3600)
        elif forgery == "extra_claim":
            token = self._token(scope, principal, purpose=None, session="conformance", role="maintainer")
        elif forgery == "missing_claim":
            token = self._token(scope, principal, purpose=None, session="conformance", agent_id=None)
        elif forgery == "missing_audit_id":  # valid for tools/list, refused on tools/call
            token = self._token(scope, principal, purpose=None, session="conformance", audit_id=None)
        elif forgery == "foreign_tenant":  # a tenant no key is trusted for: made up for this run
            token = self._token(scope, principal, purpose=None, session="conformance", tenant=unique_name("tenant"))
        elif forgery == "foreign_issuer":  # signed by the trusted key, in the name of another host
            token = self._token(scope, principal, purpose=None, session="conformance", issuer=unique_name("issuer"))
        elif forgery == "alg_none":
            token = _unsigned(self._token(scope, principal, purpose=None, session="conformance"))
        else:
            raise ValueError(f"unknown forgery {forgery}")
        return {HOST_BINDING_META_KEY: token}


def unique_name(kind: str) -> str:
    """A name no configuration can hold yet: made up at run time."""
    return f"conformance-foreign-{kind}-{secrets.token_hex(8)}"


@dataclass
class SignedConfirmationReference:
    """The host wiring's reference: an EdDSA JWS (typ engram-confirmation+jwt) signed with the binding's key."""

    binding: SignedMetaBinding
    ttl: int  # the longest span the target accepts (profile [confirmation] reference_ttl_seconds)

    flaws = frozenset({"expired", "too_long_lived", "over_declared_ttl", "forged_signature", "untrusted_key",
                       "binding_token"})
    LIFETIME = 60.0  # a valid reference's span, when the target accepts one that long

    def _token(self, scope: ScopeProfile, principal: str, tool: str, arguments: dict[str, Any], *, approved_at: float,
               lifetime: float, key: Ed25519PrivateKey | None = None, **overrides: Any) -> str:
        host = self.binding
        return mint_confirmation_reference(
            key or host.key, host.kid, audience=host.audience, issuer=host.issuer, tool=tool, arguments=arguments,
            tenant=scope.tenant, workspace=scope.workspace, principal=principal, approved_at=approved_at,
            lifetime=lifetime, **overrides)

    def approve(self, scope: ScopeProfile, principal: str, tool: str, arguments: dict[str, Any], *,
                approved_ago: float = 0.0, lifetime: float | None = None, jti: str | None = None) -> dict[str, Any]:
        span = min(self.LIFETIME, self.ttl) if lifetime is None else lifetime
        extra: dict[str, Any] = {"jti": jti} if jti is not None else {}
        token = self._token(scope, principal, tool, arguments, approved_at=time.time() - approved_ago,
                            lifetime=span, **extra)
        return {CONFIRMATION_REF_META_KEY: token}

    def flawed(self, flaw: ReferenceFlaw, scope: ScopeProfile, principal: str, tool: str,
               arguments: dict[str, Any]) -> dict[str, Any]:
        now = time.time()
        # Margins of the binding clock skew, so that a server on a slightly different clock judges alike.
        if flaw == "expired":  # approved recently (inside the execution window), expired well past the skew
            token = self._token(scope, principal, tool, arguments, approved_at=now - 3 * BINDING_CLOCK_SKEW - 2,
                                lifetime=BINDING_CLOCK_SKEW)
        elif flaw == "too_long_lived":  # one second over the ceiling: no server may accept it
            token = self._token(scope, principal, tool, arguments, approved_at=now, lifetime=CONFIRMATION_TTL_MAX + 1)
        elif flaw == "over_declared_ttl":  # one second over the TTL the profile says the target accepts
            token = self._token(scope, principal, tool, arguments, approved_at=now, lifetime=self.ttl + 1)
        elif flaw == "untrusted_key":
            token = self._token(
                scope,
                principal,
                tool,
                arguments,
                approved_at=now,
                lifetime=min(self.LIFETIME, self.ttl),
                key=generate_host_key()[0],
            )
        elif flaw == "forged_signature":  # the claims of one approval under the signature of another
            real = self._token(
                scope, principal, tool, arguments, approved_at=now, lifetime=min(self.LIFETIME, self.ttl)
            )
            other = self._token(scope, principal, tool, {**arguments, "idempotency_key": arguments.get(
                "idempotency_key", "") + "-x"}, approved_at=now, lifetime=min(self.LIFETIME, self.ttl))
            token = ".".join([*real.split(".")[:2], other.split(".")[2]])
        elif flaw == "binding_token":  # a valid binding of the same host, sent where a reference goes
            token = self.binding.meta(scope, principal)[HOST_BINDING_META_KEY]
        else:
            raise ValueError(f"unknown reference flaw {flaw}")
        return {CONFIRMATION_REF_META_KEY: token}


@dataclass
class ReferenceConfirmation:
    """How the harness confirms as host toward a target that serves the host-reference mode only.

    Every check's gated call gets what a host would send: a valid reference where the check's human would
    approve (``answer`` accept), and a reference that approves nothing where the human would not, so the
    call still reaches the gate and ends there (gate_failed), as a declined confirmation does."""

    references: ConfirmationReferences
    profile: Profile
    REFUSED = REFUSED_REFERENCE  # not a JWS: refused by any server at the gate

    def __call__(self, tool: str, arguments: Any, meta: dict[str, Any], answer: Answer) -> dict[str, Any]:
        if CONFIRMATION_REF_META_KEY in meta or not isinstance(arguments, dict):
            return meta
        bound = self._bound(meta)
        if bound is None or not self._gated(tool, bound[0]):
            return meta
        if answer != "accept":
            return {**meta, CONFIRMATION_REF_META_KEY: self.REFUSED}
        try:
            return {**meta, **self.references.approve(bound[0], bound[1], tool, arguments)}
        except (ValueError, TypeError, KeyError):  # arguments no digest can cover: the server refuses them first
            return meta

    def _bound(self, meta: dict[str, Any]) -> tuple[ScopeProfile, str] | None:
        """The profile scope and principal of the binding the harness itself put in ``meta``."""
        try:
            claims = jwt.decode(meta[HOST_BINDING_META_KEY], options={"verify_signature": False})
        except (KeyError, TypeError, jwt.PyJWTError):
            return None
        scope = next((s for s in self.profile.scopes
                      if (s.tenant, s.workspace) == (claims.get("tenant"), claims.get("workspace"))), None)
        return None if scope is None or not isinstance(claims.get("principal"), str) else (scope, claims["principal"])

    @staticmethod
    def _gated(tool: str, scope: ScopeProfile) -> bool:
        """Whether the call needs a confirmation: by the contract's tool data and the scope's policy."""
        return tool in load().tools and confirmation_required(tool, scope.policy_tools)  # an unknown tool is not gated


def references_from_profile(profile: Profile) -> ConfirmationReferences | None:
    """The reference minter of a profile that declares the host-reference mode and a signed binding, else None."""
    if not profile.given or "host-reference" not in profile.confirmation_modes:
        return None
    return SignedConfirmationReference(SignedMetaBinding.from_profile(profile), profile.reference_ttl_seconds)


def _unsigned(token: str) -> str:
    """The same claims under an ``alg: none`` header with no signature."""
    import base64
    import json

    _, payload, _ = token.split(".")
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}."


class ElicitationConfirmer:
    """The host wiring's confirmation: a form with one boolean, ``confirm``."""

    def elicit_result(self, answer: Answer) -> dict[str, Any] | None:
        results: dict[str, dict[str, Any] | None] = {
            "accept": {"action": "accept", "content": {"confirm": True}},
            "accept_false": {"action": "accept", "content": {"confirm": False}},
            "decline": {"action": "decline"},
            "cancel": {"action": "cancel"},
            "silence": None,
        }
        return results[answer]

    def input_responses(self, answer: Answer) -> dict[str, Any]:
        result = self.elicit_result(answer)
        return {} if result is None else {CONFIRMATION_INPUT_KEY: result}


class NoBinding:
    """The host of a run without a profile: it holds no key, so it can only leave a call unbound."""

    forgeries = frozenset({"missing", "garbage"})

    def meta(self, scope: ScopeProfile, principal: str, *, purpose: str | None = None, session: str = "conformance",
             audit_id: str | None = None, deadline: float | None = None) -> dict[str, Any]:
        import pytest

        pytest.skip(f"{NEEDS_PROFILE}: a signed binding for {scope.label}")

    def audit_id_of(self, meta: Mapping[str, Any]) -> str | None:
        return None

    def forged(self, forgery: Forgery, scope: ScopeProfile, principal: str) -> dict[str, Any]:
        import pytest

        if forgery == "garbage":
            return {HOST_BINDING_META_KEY: "not-a-token"}
        if forgery != "missing":
            pytest.skip(f"{NEEDS_PROFILE}: a {forgery} binding is forged from the host's key")
        return {}
