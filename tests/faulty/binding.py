"""Faulty variants: binding, discovery and the order of checks. Each trusts the client where the host binding
should decide (a purpose it claims, a signature nobody checked), compares in the wrong order, or advertises
what discovery must not show: a maintenance tool, open input schemas, tools for an unbound session, a result
for a tool the contract does not define, refusal texts that contradict the advertised output schema.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import jwt
import mcp_types as types
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from mcp.server import ServerRequestContext

from engram_mcp.contract.binding import (
    HOST_BINDING_META_KEY,
    Binding,
    generate_host_key,
    signed_claims,
    verify_binding,
)
from engram_mcp.reference._journal import scope_of
from engram_mcp.reference._server import protocol_error
from engram_mcp.reference.server import CallContext, SignedBindings
from tests.faulty.catalog import CONTRACT, UNTRUSTED, all_tools, claimed_purpose, error_rewrite, variant
from tests.variant_server import Seams, Served, Step


@variant("purpose-mismatch-tolerated", breaks=["EMC-HOST-008"], caught_by=["binding.purpose-mismatch"], era="legacy")
def purpose_mismatch_tolerated(seams: Seams) -> None:
    """The purpose_ref in the arguments is trusted over the host-bound one."""

    async def trusting(call: CallContext, serve: Step) -> Served:
        claimed = claimed_purpose(call.tool, call.arguments)
        if isinstance(claimed, str):
            call.binding = dataclasses.replace(call.binding, purpose_ref=claimed)
        return await serve(call)

    seams.around.append(trusting)


@variant("purpose-before-arguments", breaks=["EMC-HP-022"], caught_by=["wiring.order-of-checks"], era="modern")
def purpose_before_arguments(seams: Seams) -> None:
    """The purpose is compared before the arguments are validated."""

    async def early(call: CallContext, serve: Step) -> Served:
        claimed = claimed_purpose(call.tool, call.arguments)
        if isinstance(claimed, str) and claimed != call.binding.purpose_ref:
            raise protocol_error(UNTRUSTED)
        return await serve(call)

    seams.around.append(early)


@variant("maintenance-tool-listed", breaks=["EMC-DISC-001"], caught_by=["discovery.no-maintenance-tool"], era="legacy")
def maintenance_tool_listed(seams: Seams) -> None:
    """tools/list also advertises an engram_memory_admin tool to every bound principal."""
    admin = types.Tool(name="engram_memory_admin", description="Backup, restore and key rotation.",
                       input_schema={"type": "object", "properties": {"operation": {"enum": ["backup", "restore"]}},
                                     "required": ["operation"], "additionalProperties": False})

    def rewrite(request: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        return result.model_copy(update={"tools": [*result.tools, admin]}) if result.tools else result

    seams.list_rewrites.append(rewrite)


@variant("input-schema-open", breaks=["EMC-HOST-002"], caught_by=["discovery.input-schemas"], era="modern")
def input_schema_open(seams: Seams) -> None:
    """Advertised input schemas lose additionalProperties: false at the top (validation stays closed)."""

    def opened(name: str, tool: types.Tool) -> types.Tool:
        schema = {k: v for k, v in tool.input_schema.items() if k != "additionalProperties"}
        return tool.model_copy(update={"input_schema": schema})

    seams.retool(opened)


def _opened_below_top(node: Any, depth: int = 0) -> Any:
    """The schema without additionalProperties anywhere under its top level."""
    if isinstance(node, list):
        return [_opened_below_top(item, depth) for item in node]
    if not isinstance(node, dict):
        return node
    return {k: _opened_below_top(v, depth + 1) for k, v in node.items()
            if not (k == "additionalProperties" and depth > 0)}


@variant("input-schema-nested-open", breaks=["EMC-HOST-002"], caught_by=["discovery.input-schemas"], era="legacy")
def input_schema_nested_open(seams: Seams) -> None:
    """Advertised schemas lose additionalProperties: false below the top (payload, evidence, capability_policy)."""
    seams.retool(lambda name, tool: tool.model_copy(update={"input_schema": _opened_below_top(tool.input_schema)}))


@variant("output-schema-contradicts-messages", breaks=["EMC-ENV-004"], caught_by=["discovery.output-schemas"],
         era="modern")
def output_schema_contradicts_messages(seams: Seams) -> None:
    """The server words its refusals its own way, but its advertised outputSchema still pins other texts."""

    def change(request: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        error["message"] = "Request refused; see the operator's guide."

    error_rewrite(seams, change)


@variant("message-carries-request-number", breaks=["EMC-ENV-006"], caught_by=["envelope.fixed-messages"], era="legacy")
def message_carries_request_number(seams: Seams) -> None:
    """Every refusal's message ends with a per-call request number: no input echoed, but no constant text either."""
    numbers = itertools.count(1000)

    def change(request: Any, params: Any, envelope: dict[str, Any], error: dict[str, Any]) -> None:
        error["message"] = f"{error['message']} (request {next(numbers)})"

    error_rewrite(seams, change)


@variant("unknown-tool-is-result", breaks=["EMC-DISC-003"], caught_by=["discovery.unknown-tool"], era="legacy")
def unknown_tool_is_result(seams: Seams) -> None:
    """A tool name the contract does not define is answered with an isError result, not -32602."""

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        if params.name in CONTRACT.tools or seams.server.trusted_binding(request) is None:
            return None
        return types.CallToolResult(content=[types.TextContent(type="text", text=f"Unknown tool: {params.name}")],
                                    is_error=True)

    seams.intercept.append(intercept)


@variant("unbound-list-shows-all", breaks=["EMC-HP-013"], caught_by=["wiring.unbound-list-is-empty"], era="modern")
def unbound_list_shows_all(seams: Seams) -> None:
    """tools/list without a binding lists all six tools."""

    def rewrite(request: ServerRequestContext, result: types.ListToolsResult) -> types.ListToolsResult:
        if HOST_BINDING_META_KEY not in (request.meta or {}):
            return result.model_copy(update={"tools": all_tools(seams.server)})
        return result

    seams.list_rewrites.append(rewrite)


class _UncheckedSignature:
    """Host bindings whose signature goes unchecked: a token naming a trusted kid is re-signed with a throwaway
    key, so that every other check of the binding (header, kid, audience, times, claims) still runs."""

    def __init__(self, inner: SignedBindings) -> None:
        self.inner = inner
        self.private, self.public = generate_host_key()

    def verify(self, token: Any) -> Binding:
        try:
            header = jwt.get_unverified_header(token)
            claims = jwt.decode(token, options={"verify_signature": False, "verify_exp": False, "verify_nbf": False,
                                                "verify_iat": False, "verify_aud": False, "verify_iss": False})
        except Exception:  # anything unreadable goes the reference's way
            return self.inner.verify(token)
        kid = header.get("kid")
        if header.get("alg") != "EdDSA" or not isinstance(kid, str) or kid not in self.inner.trusted_keys:
            return self.inner.verify(token)
        resigned = jwt.encode(claims, self.private, algorithm="EdDSA",
                              headers={k: v for k, v in header.items() if k != "alg"})
        return self._trusting(kid, self.public).verify(resigned)

    def _trusting(self, kid: str, public: Ed25519PublicKey) -> SignedBindings:
        """The configured bindings, with the kid's key replaced by the throwaway one."""
        host = dataclasses.replace(self.inner.trusted_keys[kid], public_key=public)
        return dataclasses.replace(self.inner, trusted_keys={kid: host})


def _unchecked_signature(inner: Any) -> _UncheckedSignature:
    assert isinstance(inner, SignedBindings), "the variant re-signs for the configured signed bindings"
    return _UncheckedSignature(inner)


@variant(
    "binding-signature-unchecked",
    breaks=["EMC-HOST-011", "EMC-HP-004"],
    caught_by=["binding.untrusted-signer"],
    era="legacy",
)
def binding_signature_unchecked(seams: Seams) -> None:
    """The binding's signature is never verified; header, kid, audience and times still are."""
    seams.port("host", _unchecked_signature)



class _AgentIdOptional:
    """Host bindings whose agent_id claim may be left out: the signature, header, times and every other claim are
    checked as the reference checks them, and a binding without agent_id is served as an anonymous agent's."""

    def __init__(self, inner: SignedBindings) -> None:
        self.inner = inner

    def verify(self, token: Any) -> Binding:
        def signed(token: str, keys: Any, token_type: str) -> tuple[dict[str, Any], Any]:
            claims, host = signed_claims(token, keys, token_type)
            claims.setdefault("agent_id", "anonymous-agent")
            return claims, host

        inner = self.inner
        return verify_binding(token, inner.trusted_keys, audience=inner.audience, max_lifetime=inner.max_lifetime,
                              claims_valid=inner.claims_valid, signed=signed)


@variant("binding-without-agent-served", breaks=["EMC-HOST-011", "EMC-HP-005"], caught_by=["binding.claims"],
         era="modern")
def binding_without_agent_served(seams: Seams) -> None:
    """A binding that leaves out the agent_id claim is served, as an anonymous agent's call."""

    def lenient(inner: Any) -> _AgentIdOptional:
        assert isinstance(inner, SignedBindings), "the variant relaxes the configured signed bindings"
        return _AgentIdOptional(inner)

    seams.port("host", lenient)


SDK_UNKNOWN_TOOL = "MCP error -32602: Tool {name} not found"  # what an SDK's tool registry says of a name it lacks


@variant("unknown-tool-as-sdk-result", breaks=["EMC-DISC-003"], caught_by=["discovery.unknown-tool"], era="modern")
def unknown_tool_as_sdk_result(seams: Seams) -> None:
    """A bound call of a tool the caller does not have (unknown, or not granted) is answered as an SDK's tool
    registry answers a name it lacks: a tool result with isError true and the text 'MCP error -32602: Tool … not
    found', and no envelope, where the contract wants the JSON-RPC error -32602."""

    async def intercept(request: ServerRequestContext, params: types.CallToolRequestParams) -> Any:
        binding = seams.server.trusted_binding(request)
        if binding is None or params.name in seams.server.grants.tools_for(scope_of(binding), binding.principal):
            return None
        text = SDK_UNKNOWN_TOOL.format(name=params.name)
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)

    seams.intercept.append(intercept)
