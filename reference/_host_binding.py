"""The host's side of a call, as ports of the server: the binding it signs and the grants it configured.

``HostBinding`` turns the token a request carries into a trusted ``Binding`` (or raises
``BindingRejected``); ``Grants`` says which tools a principal may call in a scope, and whether it may
capture there. The defaults read the server's configuration.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from engram_mcp.contract.binding import (
    BINDING_MAX_LIFETIME,
    Binding,
    SignedClaims,
    TrustedHost,
    binding_claims_valid,
    signed_claims,
    verify_binding,
)
from engram_mcp.reference._ports import Scope


class HostBinding(Protocol):
    def verify(self, token: Any) -> Binding:
        """The binding the token carries, or BindingRejected (its reason for the server's log only)."""


VERIFIED_TOKENS_KEPT = 1024  # signatures remembered: a host sends one binding on many calls


@dataclass(frozen=True)
class SignedBindings:
    """Bindings signed by a configured host key, for this server's audience, within the contract's limits.

    A token whose signature verified is remembered (the same bytes under the same keys verify the same way), so
    a binding a host sends on many calls pays for its signature once; every claim check, the clock's included,
    still runs on every call, and a token that failed is checked afresh each time.
    """

    trusted_keys: Mapping[str, TrustedHost]
    audience: str
    max_lifetime: float = BINDING_MAX_LIFETIME
    claims_valid: Callable[[Any], bool] = binding_claims_valid
    _signed: SignedClaims = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_signed", _remembering(self.trusted_keys))

    def verify(self, token: Any) -> Binding:
        return verify_binding(token, self.trusted_keys, audience=self.audience, max_lifetime=self.max_lifetime,
                              claims_valid=self.claims_valid, signed=self._signed)


def _remembering(trusted_keys: Mapping[str, TrustedHost]) -> SignedClaims:
    """``signed_claims`` for these keys, remembering the tokens that verified (never those that did not)."""

    @functools.lru_cache(maxsize=VERIFIED_TOKENS_KEPT)
    def verified(token: str, token_type: str) -> tuple[Mapping[str, Any], TrustedHost]:
        claims, host = signed_claims(token, trusted_keys, token_type)
        return MappingProxyType(claims), host  # read-only: every caller gets the same claims

    def signed(token: str, keys: Mapping[str, TrustedHost], token_type: str) -> tuple[dict[str, Any], TrustedHost]:
        if keys is not trusted_keys:
            return signed_claims(token, keys, token_type)
        claims, host = verified(token, token_type)
        return dict(claims), host

    return signed


class Grants(Protocol):
    def tools_for(self, scope: Scope, principal: str) -> frozenset[str]:
        """The tools the principal is granted in the scope (none where memory is off for it)."""

    def may_capture(self, scope: Scope, principal: str) -> bool:
        """Whether the principal has capture authority in the scope (EMC-HP-057)."""
