"""Discovery and host binding: who sees which tools, and which calls are trusted at all."""

from __future__ import annotations

import dataclasses
from typing import cast

import pytest

from engram_mcp.conformance import _schemas
from engram_mcp.conformance._checks import check, pin, require
from engram_mcp.conformance._needs import CASE_TOOL, SEARCH, SERVED
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, refused_with, unique
from engram_mcp.conformance.hosts import FORGERY_WORDS, Forgery
from engram_mcp.contract import load

CONTRACT = load()
UNKNOWN_TOOL = CONTRACT.protocol_errors["unknown_tool"]
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]
BUNDLED = "EMC-DISC-006"  # profile: the advertised schemas are the bundle's, byte for byte
MAINTENANCE_WORDS = ("admin", "maintain", "backup", "restore", "migrat", "rotate", "revoke", "bootstrap", "inspect",
                     "rewind", "dispute", "supersede", "expire", "history", "invalidat")


def listed(world: World, meta: dict) -> list[dict]:
    reply = world.conn.list_tools(meta)
    world.evidence.add("reply", reply.kind)
    assert reply.kind == "result", f"tools/list with a valid binding was answered {reply.said()}"
    return list(reply.result.get("tools", []))


@check("discovery.granted-tools", "EMC-DISC-002", "EMC-HOST-007", uses=())
def test_a_principal_discovers_exactly_its_granted_tools(world: World) -> None:
    """Each principal of the check's scope lists exactly the contract tools the profile grants it. Tools of the
    server's own beyond the six are the contract's business only if they offer maintenance
    (discovery.no-maintenance-tool); here they are left out of the comparison."""
    scope = world.scope
    for principal, granted in sorted(scope.principals.items()):
        names = sorted(t["name"] for t in listed(world, world.host.meta(scope, principal)))
        world.evidence.add(principal, names)
        memory = [n for n in names if n in CONTRACT.tools]
        assert memory == sorted(granted), (
            f"{principal} discovers the contract tools {spoken(memory)}, the profile grants {spoken(sorted(granted))}")


@check("discovery.no-maintenance-tool", "EMC-DISC-001", "EMC-DISC-007", uses=())
def test_no_maintenance_capability_is_advertised(world: World) -> None:
    """No tool advertised to an agent performs maintenance (by its name or its description); in this profile,
    nothing beyond the six contract tools is advertised at all."""
    scope = world.scope
    tools = listed(world, world.meta(scope))
    names = [t.get("name") for t in tools]
    extra = [n for n in names if n not in CONTRACT.tools]
    world.evidence.add("extra_tools", extra)
    pin("EMC-DISC-007", not extra, f"tools beyond the contract's six are advertised: {spoken(extra)}")
    maintenance = [t.get("name") for t in tools if t.get("name") not in CONTRACT.tools
                   and any(word in f"{t.get('name', '')} {t.get('title', '')} {t.get('description', '')}".lower()
                           for word in MAINTENANCE_WORDS)]
    world.evidence.add("maintenance_tools", maintenance)
    assert not maintenance, f"tools offering maintenance are advertised to an agent: {spoken(maintenance)}"


def contract_tools(world: World) -> list[dict]:
    tools = [tool for tool in listed(world, world.meta()) if tool.get("name") in CONTRACT.tools]
    if not tools:
        pytest.skip("the target lists none of the contract's tools: there is no schema to judge")
    return tools


@check("discovery.input-schemas", "EMC-HOST-002", uses=SERVED)
def test_advertised_input_schemas_validate_as_the_contracts(world: World) -> None:
    """Every advertised inputSchema, run through a standard 2020-12 validator with its own $refs, accepts every
    valid argument fixture, refuses every fixture the contract's schema refuses, and is closed at every level."""
    disagreements = []
    for tool in contract_tools(world):
        name = tool["name"]
        found = _schemas.disagreement(name, tool.get("inputSchema"))
        world.evidence.add(name, found or f"agrees on {len(_schemas.cases(name))} cases")
        if found:
            disagreements.append(f"{name}: {found}")
        # Refusals only this project's pins ask of the schema (an opaque candidate_id, policy defaults): judged apart.
        for requirement, refused, label in _schemas.pinned_verdicts(name, tool.get("inputSchema")):
            pin(requirement, refused, f"{name}: the inputSchema accepts {label}, which this profile refuses")
        # This project's pins the bytes too; that is judged apart, at --level pins.
        pin(BUNDLED, tool.get("inputSchema") == CONTRACT.advertised_input_schema(name),
            f"{name}: the inputSchema differs from the bundled one")
        pin(BUNDLED, tool.get("outputSchema") == CONTRACT.advertised_output_schema(name),
            f"{name}: the outputSchema differs from the bundled one")
    assert not disagreements, "the advertised inputSchema " + "; ".join(disagreements)


@check("discovery.output-schemas", "EMC-ENV-004", uses=SERVED)
def test_advertised_output_schemas_accept_what_the_tool_sends(world: World) -> None:
    """An advertised outputSchema is a usable 2020-12 schema (its own $refs, no network) that accepts the
    envelopes the tool sends: a refusal of empty arguments, and a search's success."""
    problems = []
    for tool in contract_tools(world):
        name = tool["name"]
        schema = tool.get("outputSchema")
        if schema is None:
            world.evidence.add(name, "no outputSchema advertised")
            continue
        try:
            checker = _schemas.validator(schema, name + ":output")
            sent = [("a refusal of empty arguments", world.call(name, {}))]
            if name == "engram_memory_search":
                sent.append(
                    ("a search", world.call(name, {"query": "ledger", "purpose_ref": world.profile.purpose_ref}))
                )
            for label, reply in sent:
                envelope = reply.envelope
                if reply.kind != "result" or not isinstance(envelope, dict):
                    world.evidence.add(f"{name}: {label}", reply.kind)
                    continue
                if not _schemas.accepts(checker, envelope):
                    problems.append(f"{name}: its outputSchema refuses {label} it sent")
        except _schemas.UnusableSchema as unusable:
            problems.append(f"{name}: outputSchema {unusable}")
    assert not problems, "; ".join(problems)


@check("discovery.opted-out-sees-nothing", "EMC-DISC-004", "EMC-HP-016", uses=(), cases={"opted-out": ()})
@pytest.mark.parametrize("kind", ["opted-out", "never-configured"])
def test_a_scope_not_opted_in_discovers_no_tool(world: World, kind: str) -> None:
    """A scope the host has not opted in — or a workspace of a trusted tenant never configured at all — discovers no
    memory tool. (A tenant the host key is not trusted for is refused instead: host.foreign-tenant.)"""
    if kind == "opted-out":
        scope = world.role("memory-off")
    else:
        scope = dataclasses.replace(world.scope, workspace="workspace-" + unique("never"))
    principal = next(iter(sorted(scope.principals)), "conformance-agent")
    reply = world.conn.list_tools(world.host.meta(scope, principal))
    world.evidence.add("reply", {"kind": reply.kind, "error": reply.error})
    if reply.kind == "error":  # -32603 names a tenant or principal mismatch too (§0): no list, no memory
        refused_with(reply, "trusted_context_unavailable", f"tools/list for a {kind} scope")
        pin("EMC-HOST-013", False, f"tools/list for a {kind} scope was refused -32603, not an empty list")
        return
    assert reply.kind == "result", f"tools/list for a {kind} scope answered {reply.kind}"
    names = [t.get("name") for t in reply.result.get("tools", [])]
    world.evidence.add("tools", names)
    assert not [n for n in names if n in CONTRACT.tools], f"a {kind} scope discovers memory tools: {spoken(names)}"


@check("discovery.unknown-tool", "EMC-DISC-003", "EMC-DISC-004", "EMC-HOST-007", "EMC-HP-016", "EMC-HP-018",
       uses=())  # it calls tools the caller does not have: whether the target serves them changes nothing
@pytest.mark.parametrize("kind", ["unknown", "ungranted", "opted-out", "never-configured", "principal-without-grant"])
def test_an_unavailable_tool_is_the_unknown_tool_error(world: World, kind: str) -> None:
    """Calling a tool that does not exist for the caller is JSON-RPC -32602 'Unknown tool', verbatim."""
    scope, tool = world.scope, "engram_memory_get"
    principal: str | None = None
    if kind == "unknown":
        tool = "engram_memory_" + "undefined_probe"
    elif kind == "ungranted":
        principal = world.need(scope.limited_principal(), "limited-principal")
        missing = sorted(set(CONTRACT.tools) - scope.principals[principal])
        require(missing, "the limited principal lacks no tool")
        tool = missing[0]
    elif kind == "opted-out":
        scope = world.role("memory-off")
        principal = next(iter(sorted(scope.principals)), "conformance-agent")
    elif kind == "never-configured":  # a workspace never configured, of a tenant the host key is trusted for
        scope = dataclasses.replace(world.scope, workspace="workspace-" + unique("never"))
    else:
        principal = "principal-" + unique("ungranted")
    meta = world.host.meta(scope, principal or world.principal(scope))
    reply = world.conn.call(tool, {"record_id": "mem_aaaa", "purpose_ref": world.profile.purpose_ref}, meta)
    world.evidence.add("reply", {"kind": reply.kind, "error": reply.error})
    if reply.judgement is not None:
        world.expect(reply, f"a call of a tool that does not exist for the caller ({kind})")
    what = f"a call of a tool that does not exist for the caller ({kind})"
    untrusted_allowed = kind in ("opted-out", "never-configured", "principal-without-grant")
    named = ("trusted_context_unavailable" if untrusted_allowed and reply.kind == "error"
             and (reply.error or {}).get("code") == UNTRUSTED.jsonrpc_code else "unknown_tool")
    refused_with(reply, named, what)


NEEDS_NO_SCOPE = frozenset({"missing", "garbage"})  # forgeries that bind nothing, so they need no scope to forge


def refused(world: World, forgery: str) -> None:
    """A search under a forged binding must be the constant -32603, with no envelope. A forgery that binds nothing
    (no binding, or one that is no token) needs no host identity: it is sent whatever the profile holds, so that a
    profile never hides a failure a run without one shows."""
    if forgery not in world.host.forgeries:
        pytest.skip(f"the host adapter cannot forge {FORGERY_WORDS.get(forgery, forgery)}")
    scope = world.profile.scope_for({SEARCH}) if world.profile.given else None
    if scope is not None and world.serves(SEARCH):
        principal = world.principal(scope, {SEARCH})
        world._require_offered(SEARCH, scope, principal)  # a target without the tool cannot refuse its call
        meta = world.host.forged(cast(Forgery, forgery), scope, principal)  # one of world.host.forgeries
    elif forgery in NEEDS_NO_SCOPE:
        world.require_offered_unbound(SEARCH)
        meta = world.host.forged(cast(Forgery, forgery),  # one of world.host.forgeries
                                 None, "")  # type: ignore[arg-type]  # a bare binding needs no scope, and there is none
    else:
        world.scope  # noqa: B018 - SKIP, saying what the profile lacks: a forgery of a real binding needs a scope
        return
    reply = world.conn.call(SEARCH, {"query": "ledger", "purpose_ref": world.profile.purpose_ref}, meta)
    world.evidence.add("reply", reply.wire())
    refused_with(reply, "trusted_context_unavailable", f"a search under {FORGERY_WORDS[forgery]}")


# One check per part of the profile a forgery breaks, so a verdict names the part that failed.
@check("binding.untrusted-call", "EMC-HOST-011", "EMC-HP-011", uses=SEARCH, unbound=True)
@pytest.mark.parametrize("forgery", ["missing", "garbage"])
def test_a_call_without_a_binding_is_refused(world: World, forgery: str) -> None:
    """A call with no binding, or with one that is no token at all, is -32603 'Trusted invocation context
    unavailable'."""
    refused(world, forgery)


@check("binding.untrusted-signer", "EMC-HOST-011", "EMC-HP-003", "EMC-HP-004", uses=SEARCH)
@pytest.mark.parametrize("forgery", ["untrusted_key", "alg_none"])
def test_a_binding_from_an_untrusted_signer_is_refused(world: World, forgery: str) -> None:
    """A binding signed by a key the server does not hold, or not signed (alg none), is refused."""
    refused(world, forgery)


@check("binding.claims", "EMC-HOST-011", "EMC-HP-005", uses=SEARCH)
def test_a_binding_missing_a_claim_is_refused(world: World) -> None:
    """A binding missing a claim the server needs (here agent_id) is host context missing: refused."""
    refused(world, "missing_claim")


@check("binding.extra-claim", "EMC-HP-069", uses=SEARCH)
def test_a_binding_with_another_claim_is_refused(world: World) -> None:
    """A binding carrying a claim beyond the profile's closed set is refused."""
    refused(world, "extra_claim")


@check("binding.audience", "EMC-HP-006", uses=SEARCH)
def test_a_binding_for_another_audience_is_refused(world: World) -> None:
    """A binding minted for another server's audience is refused."""
    refused(world, "wrong_audience")


@check("binding.lifetime", "EMC-HOST-011", uses=SEARCH)
@pytest.mark.parametrize("forgery", ["expired", "not_yet_valid"])
def test_a_binding_outside_its_lifetime_is_refused(world: World, forgery: str) -> None:
    """An expired or not yet valid binding is no trusted host context: refused."""
    refused(world, forgery)


@check("binding.max-lifetime", "EMC-HP-007", uses=SEARCH)
def test_a_binding_valid_too_long_is_refused(world: World) -> None:
    """A binding whose lifetime exceeds binding.max_lifetime is refused."""
    refused(world, "too_long_lived")


@check("binding.purpose-mismatch", "EMC-HOST-008", "EMC-HP-021", uses=CASE_TOOL)
@pytest.mark.parametrize("tool", ["engram_memory_search", "engram_memory_get", "engram_memory_capture"])
def test_a_purpose_other_than_the_bound_one_is_refused(world: World, tool: str) -> None:
    """purpose_ref in the arguments must equal the bound purpose; otherwise -32603."""
    from engram_mcp.conformance._world import capture_arguments

    scope = world.scope
    other = world.profile.purpose_ref + "-other"
    arguments = {
        "engram_memory_search": {"query": "ledger", "purpose_ref": other},
        "engram_memory_get": {"record_id": "mem_aaaa", "purpose_ref": other},
        "engram_memory_capture": capture_arguments(other),
    }[tool]
    reply = world.call(tool, arguments, scope=scope)
    world.evidence.add("reply", {"kind": reply.kind, "error": reply.error, "code": reply.code})
    world.expect(reply, f"a {tool.removeprefix('engram_memory_')} whose purpose_ref is not the bound one")
    if tool == "engram_memory_capture":  # the refusal stored nothing: the same key, with the bound purpose, runs
        fixed = capture_arguments(world.profile.purpose_ref, key=arguments["idempotency_key"])
        fixed["payload"] = {**arguments["payload"], "purpose_ref": world.profile.purpose_ref}
        retry = world.call(tool, fixed, scope=scope)
        world.evidence.add("same_key_bound_purpose", {"kind": retry.kind, "code": retry.code,
                                                      "status": (retry.value or {}).get("status")})
        world.expect(retry, "the same capture with the bound purpose, under the same key")


@check("binding.tools-list-untrusted", "EMC-HOST-011", "EMC-HP-014", uses=())
def test_tools_list_with_an_untrusted_binding_is_refused(world: World) -> None:
    """tools/list with a binding that is present but invalid is -32603, not a tool list."""
    scope = world.scope
    if "garbage" not in world.host.forgeries:
        pytest.skip("the host adapter cannot forge a garbage binding")
    reply = world.conn.list_tools(world.host.forged("garbage", scope, world.principal(scope)))
    world.evidence.add("reply", {"kind": reply.kind, "error": reply.error})
    assert reply.kind == "error" and reply.error["code"] == UNTRUSTED.jsonrpc_code, (
        f"tools/list with a garbage binding answered {reply.said()}, not the error {UNTRUSTED.jsonrpc_code}")
