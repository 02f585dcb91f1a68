"""How the harness acts as host: binding each call, and answering confirmations.

Both are Protocols. The default adapters follow spec/host-profile.md (a signed
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
from engram_mcp.contract.binding import (
    CONFIRMATION_INPUT_KEY,
    HOST_BINDING_META_KEY,
    generate_host_key,
    load_private_key,
    mint_binding,
    new_audit_id,
)

# Ways a binding can be broken; an adapter lists those it can produce.
Forgery = Literal["missing", "garbage", "expired", "not_yet_valid", "wrong_audience", "untrusted_key",
                  "too_long_lived", "alg_none", "extra_claim", "missing_claim", "missing_audit_id",
                  "foreign_tenant", "foreign_issuer"]
Answer = Literal["accept", "decline", "cancel", "accept_false", "silence"]


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


@dataclass
class SignedMetaBinding:
    """The host profile's binding: an EdDSA JWT under the host-binding ``_meta`` key."""

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
            raise ProfileError(f"{profile.path}: binding.private_key_file: {binding.get('private_key_file')} is not "
                               "a readable PEM Ed25519 private key") from None
        return cls(key=key, kid=binding["kid"], issuer=binding["issuer"],
                   audience=profile.audience, purpose_ref=profile.purpose_ref)

    def _token(self, scope: ScopeProfile, principal: str, *, purpose: str | None, session: str,
               key: Ed25519PrivateKey | None = None, **overrides: Any) -> str:
        claims = {"audience": self.audience, "issuer": self.issuer, "tenant": scope.tenant, "workspace": scope.workspace,
                  "principal": principal, "agent_id": "conformance-agent", "session": session,
                  "purpose_ref": purpose or self.purpose_ref, "lifetime": self.lifetime}
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

    def forged(self, forgery: Forgery, scope: ScopeProfile, principal: str) -> dict[str, Any]:
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


def _unsigned(token: str) -> str:
    """The same claims under an ``alg: none`` header with no signature."""
    import base64
    import json

    _, payload, _ = token.split(".")
    header = base64.urlsafe_b64encode(json.dumps({"alg": "none", "typ": "JWT"}).encode()).rstrip(b"=").decode()
    return f"{header}.{payload}."


class ElicitationConfirmer:
    """The host profile's confirmation: a form with one boolean, ``confirm``."""

    def elicit_result(self, answer: Answer) -> dict[str, Any] | None:
        return {
            "accept": {"action": "accept", "content": {"confirm": True}},
            "accept_false": {"action": "accept", "content": {"confirm": False}},
            "decline": {"action": "decline"},
            "cancel": {"action": "cancel"},
            "silence": None,
        }[answer]

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

        if forgery == "missing":
            return {}
        if forgery == "garbage":
            return {HOST_BINDING_META_KEY: "not-a-token"}
        pytest.skip(f"{NEEDS_PROFILE}: a {forgery} binding is forged from the host's key")


def host_from_profile(profile: Profile) -> tuple[HostBinding, Confirmer]:
    if not profile.given:
        return NoBinding(), ElicitationConfirmer()
    from engram_mcp.conformance.hosts import adapter_for  # the public registry imports this module

    return adapter_for(profile.binding["kind"])(profile)
