"""The host's side of a call, as ports of the server: the binding it signs and the grants it configured.

``HostBinding`` turns the token a request carries into a trusted ``Binding`` (or raises
``BindingRejected``); ``Grants`` says which tools a principal may call in a scope, and whether it may
capture there. The defaults read the server's configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from engram_mcp.contract.binding import (
    BINDING_MAX_LIFETIME,
    Binding,
    TrustedHost,
    binding_claims_valid,
    verify_binding,
)
from engram_mcp.reference._ports import Scope


class HostBinding(Protocol):
    def verify(self, token: Any) -> Binding:
        """The binding the token carries, or BindingRejected (its reason for the server's log only)."""


@dataclass(frozen=True)
class SignedBindings:
    """Bindings signed by a configured host key, for this server's audience, within the contract's limits."""

    trusted_keys: Mapping[str, TrustedHost]
    audience: str
    max_lifetime: float = BINDING_MAX_LIFETIME
    claims_valid: Callable[[Any], bool] = binding_claims_valid

    def verify(self, token: Any) -> Binding:
        return verify_binding(token, self.trusted_keys, audience=self.audience, max_lifetime=self.max_lifetime,
                              claims_valid=self.claims_valid)


class Grants(Protocol):
    def tools_for(self, scope: Scope, principal: str) -> frozenset[str]:
        """The tools the principal is granted in the scope (none where memory is off for it)."""

    def may_capture(self, scope: Scope, principal: str) -> bool:
        """Whether the principal has capture authority in the scope (EMC-HP-057)."""
