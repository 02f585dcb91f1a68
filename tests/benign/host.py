"""Benign variants: host context and discovery. Each server reads the host's side its own way where the contract
lets it: -32603 for a scope that grants nothing, a harmless tool of its own, bindings judged without this project's
pins on claims and lifetime.
"""

from __future__ import annotations

import contextlib
import math
import time
from typing import Any

import jwt
import mcp_types as types
from mcp.server import ServerRequestContext

from engram_mcp.contract.binding import (
    BINDING_ALGORITHM,
    BINDING_CLOCK_SKEW,
    BINDING_TOKEN_TYPE,
    Binding,
    BindingRejected,
    TrustedHost,
)
from engram_mcp.reference._journal import scope_of
from engram_mcp.reference.server import SignedBindings
from tests.benign.catalog import CONTRACT, UNTRUSTED, bound, journal_refusal, untrusted, variant
from tests.variant_server import Seams


@variant("unconfigured-scope-32603", freedom="EMC-HOST-007 / EMC-DISC-004: §0 names '-32603 ... principal, tenant o "
         "fuente no coincidente' as well as '-32602 Unknown tool'")
def unconfigured_scope_32603(seams: Seams) -> None:
    """A verified binding whose scope grants its principal nothing gets -32603, on tools/call and tools/list."""

    def no_memory(binding: Binding | None) -> bool:
        return binding is not None and not seams.server.grants.tools_for(scope_of(binding), binding.principal)

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> None:
        binding = seams.server.trusted_binding(request)
        if binding is not None and binding.audit_id is not None and no_memory(binding):
            tool = params.name if params.name in CONTRACT.tools else "unknown"
            await journal_refusal(seams.server, binding, tool, str(UNTRUSTED.jsonrpc_code))
            raise untrusted()

    def listed(request: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if no_memory(bound(seams, request)):
            raise untrusted()
        return result

    seams.intercept.append(intercept)
    seams.list_rewrites.append(listed)


CLOCK_TOOL = types.Tool(
    name="acme_clock_now", title="Server clock",
    description="Reads this server's clock: the current UTC instant. Reads and writes no memory.",
    input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    annotations=types.ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=False,
                                      open_world_hint=False),
)


@variant("extra-tool", freedom="EMC-DISC-001 forbids maintenance tools, not other tools")
def extra_tool(seams: Seams) -> None:
    """tools/list also offers acme_clock_now, a harmless tool that reads the server's clock."""

    async def intercept(request: ServerRequestContext,
                        params: types.CallToolRequestParams) -> types.CallToolResult | None:
        if params.name != CLOCK_TOOL.name:
            return None
        if seams.server.trusted_binding(request) is None:
            raise untrusted()
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        return types.CallToolResult(content=[types.TextContent(type="text", text=now)])

    seams.intercept.append(intercept)
    seams.list_rewrites.append(
        lambda request, result: result.model_copy(update={"tools": [*result.tools, CLOCK_TOOL]}))


CLAIMS_SCHEMA = CONTRACT.data_schema("binding-claims")
KNOWN_CLAIMS = frozenset(CLAIMS_SCHEMA["properties"])
CLAIMS_VALID = CONTRACT.validator(CLAIMS_SCHEMA)
LENIENT_REASONS = frozenset({"bad_claims", "too_long_lived"})  # the profile's closed claims and lifetime bound


def _finite(value: Any) -> bool:
    """No NaN or infinity anywhere in a claim set (JSON parsers let them through)."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict | list):
        return all(_finite(v) for v in (value.values() if isinstance(value, dict) else value))
    return True


def lenient_binding_of(token: str, trusted: Any, audience: str, now: float | None = None) -> Binding | None:
    """The binding a server that ignores unknown claims and sets no lifetime bound reads, or None.

    Everything else is judged as the reference judges it: header, trusted key and signature, the known claims'
    schema, exp after iat, issuer and tenant trust, audience, expiry and not-before, with the same skew."""
    with contextlib.suppress(jwt.PyJWTError, KeyError, TypeError):
        header = jwt.get_unverified_header(token)
        host = trusted.get(header["kid"]) if set(header) == {"alg", "kid", "typ"} else None
        if not isinstance(host, TrustedHost) or header["alg"] != BINDING_ALGORITHM \
                or header["typ"] != BINDING_TOKEN_TYPE:
            return None
        claims = jwt.decode(token, host.public_key, algorithms=[BINDING_ALGORITHM], options={
            "verify_signature": True, "verify_exp": False, "verify_nbf": False, "verify_iat": False,
            "verify_aud": False, "verify_iss": False})
        known = {k: v for k, v in claims.items() if k in KNOWN_CLAIMS}
        if not _finite(claims) or not CLAIMS_VALID.is_valid(known) or known["exp"] <= known["iat"]:
            return None
        clock = time.time() if now is None else now
        if known["iss"] not in host.issuers or known["tenant"] not in host.tenants \
                or (host.scopes is not None and (known["tenant"], known["workspace"]) not in host.scopes) \
                or known["aud"] != audience or clock >= known["exp"] + BINDING_CLOCK_SKEW \
                or max(known["iat"], known.get("nbf", 0)) > clock + BINDING_CLOCK_SKEW:
            return None
        return Binding(tenant=known["tenant"], workspace=known["workspace"], principal=known["principal"],
                       agent_id=known["agent_id"], session=known["session"], purpose_ref=known["purpose_ref"],
                       issuer=known["iss"], audience=known["aud"], issued_at=known["iat"], expires_at=known["exp"],
                       token_id=known["jti"], audit_id=known.get("audit_id"), deadline=known.get("deadline"))
    return None


class _LenientBindings:
    """The configured signed bindings, read again leniently when refused for an extra claim or a long lifetime."""

    def __init__(self, inner: SignedBindings) -> None:
        self.inner = inner

    def verify(self, token: Any) -> Binding:
        try:
            return self.inner.verify(token)
        except BindingRejected as rejected:
            lenient = rejected.reason in LENIENT_REASONS and isinstance(token, str)
            found = lenient_binding_of(token, self.inner.trusted_keys, self.inner.audience) if lenient else None
            if found is None:
                raise
            return found


@variant("lenient-binding", freedom="EMC-HP-069 (closed claims) and EMC-HP-007 (maximum lifetime) are this "
         "project's profile choices")
def lenient_binding(seams: Seams) -> None:
    """A binding with an extra claim, or one outliving binding.max_lifetime, is trusted when otherwise valid."""
    seams.port("host", _LenientBindings)
