"""The host wiring's wiring: binding carriage, order of checks, the HTTP guard, ids and digests."""

from __future__ import annotations

import base64
import json
from typing import Any, cast

import httpx2
import mcp_types as types
import pytest

from engram_mcp.conformance._checks import check, not_applicable, pin, require
from engram_mcp.conformance._needs import ADMIT, CAPTURE, GET, SEARCH, WITHDRAW
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, fresh_key
from engram_mcp.conformance.hosts import Forgery
from engram_mcp.contract import load, payload_digest, profile_digest, record_id
from engram_mcp.contract.binding import CONFIRMATION_INPUT_KEY, HOST_BINDING_META_KEY, Binding, capture_candidate_id

CONTRACT = load()
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]
UNKNOWN_TOOL = CONTRACT.protocol_errors["unknown_tool"]


def _segment(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data, separators=(",", ":")).encode()).rstrip(b"=").decode()


def _reheadered(token: str, extra: dict) -> str:
    """The token with members added to its header (the signature no longer covers them)."""
    header, payload, signature = token.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))
    return f"{_segment({**decoded, **extra})}.{payload}.{signature}"


def _offered_meta(world: World, tool: str) -> dict:
    """A valid binding for the check's scope; SKIP when the target does not offer ``tool`` under it."""
    scope = world.scope
    principal = world.principal(scope, {tool})
    world._require_offered(tool, scope, principal)
    return world.host.meta(scope, principal)


def _binding_of(world: World, principal: str) -> Binding:
    """The binding the harness mints, as the server will verify it (for id derivations)."""
    scope = world.scope
    return Binding(
        tenant=scope.tenant,
        workspace=scope.workspace,
        principal=principal,
        agent_id="",
        session="",
        purpose_ref=world.profile.purpose_ref,
        issuer="",
        audience="",
        issued_at=0,
        expires_at=0,
        token_id="",
    )


@check("wiring.binding-reused-token", "EMC-HP-009", "EMC-HP-002", uses=SEARCH)
def test_one_binding_token_serves_several_requests(world: World) -> None:
    """A host may reuse one binding token; each request is judged on the binding it carries."""
    meta = _offered_meta(world, "engram_memory_search")
    arguments = {"query": "ledger", "purpose_ref": world.profile.purpose_ref}
    first, second = (world.conn.call("engram_memory_search", arguments, meta) for _ in range(2))
    unbound = world.conn.call("engram_memory_search", arguments, {})
    world.evidence.add("kinds", [first.kind, second.kind, unbound.kind])
    pin("EMC-HP-009", first.kind == second.kind == "result", "a reused binding token was refused")
    assert unbound.kind == "error" and unbound.error["code"] == UNTRUSTED.jsonrpc_code, (
        "a request without a binding was served after bound ones: the binding leaked across requests")


@check("wiring.binding-header", "EMC-HP-068", uses=SEARCH)
@pytest.mark.parametrize("member", ["jwk", "jku", "x5u", "crit"])
def test_a_binding_header_with_key_material_is_refused(world: World, member: str) -> None:
    """A token header carrying anything but alg, typ and kid is refused, even with a valid signature underneath."""
    meta = _offered_meta(world, "engram_memory_search")
    forged = {HOST_BINDING_META_KEY: _reheadered(meta[HOST_BINDING_META_KEY], {member: "https://keys.invalid/"})}
    reply = world.conn.call(
        "engram_memory_search", {"query": "ledger", "purpose_ref": world.profile.purpose_ref}, forged
    )
    world.evidence.add("reply", {"kind": reply.kind, "code": reply.code})
    assert reply.kind == "error" and reply.error["code"] == UNTRUSTED.jsonrpc_code, (
        f"a binding whose header carries {member} answered {reply.said()}, not the error {UNTRUSTED.jsonrpc_code}")


# Forgeries that only this project's profile refuses (EMC-HP-006, EMC-HP-007, EMC-HP-069): the contract asks only
# for host context the server can trust, which these bindings still give.
REFUSED_BY_PROFILE_ALONE = frozenset({"wrong_audience", "too_long_lived", "extra_claim"})


@check("wiring.refusal-says-nothing", "EMC-HP-012", uses=SEARCH)
def test_refusals_do_not_say_why(world: World) -> None:
    """Every refused binding gets the same JSON-RPC error object: no reason, no data."""
    scope = world.scope
    principal = world.principal(scope, {"engram_memory_search"})
    world._require_offered("engram_memory_search", scope, principal)
    errors, served = [], []
    for forgery in sorted(world.host.forgeries):
        reply = world.conn.call("engram_memory_search", {"query": "ledger", "purpose_ref": world.profile.purpose_ref},
                                world.host.forged(cast(Forgery, forgery), scope, principal))  # one of forgeries
        if reply.kind != "error" and forgery in REFUSED_BY_PROFILE_ALONE:
            served.append(forgery)  # its own check reports the pin; there is no refusal here to compare
            continue
        require(reply.kind == "error", f"a {forgery} binding was served")
        errors.append(json.dumps(reply.error, sort_keys=True))
    world.evidence.add("served_though_the_profile_refuses", served)
    world.evidence.add("distinct_errors", sorted(set(errors)))
    assert len(set(errors)) == 1, "refusals differ, so they reveal why a binding was refused"
    assert "data" not in json.loads(errors[0]) or json.loads(errors[0])["data"] in (None, ""), "the error carries data"


@check("wiring.unbound-list-is-empty", "EMC-HP-013", uses=())
def test_tools_list_without_a_binding_is_an_empty_list(world: World) -> None:
    """tools/list with no binding key succeeds with no tools: memory is off by default."""
    meta: dict[str, Any] | None
    for meta, words in ((None, "no _meta"), ({}, "an empty _meta")):
        reply = world.conn.list_tools(meta)
        world.evidence.add(words, {"kind": reply.kind, "tools": len((reply.result or {}).get("tools", []))})
        listed = (reply.result or {}).get("tools")
        assert reply.kind == "result" and listed == [], (
            f"tools/list with {words} answered {reply.said()}"
            + (f" listing {len(listed)} tools" if isinstance(listed, list) else "") + ", not an empty tool list")


@check("wiring.other-methods-unbound", "EMC-HP-015", uses=())
def test_methods_other_than_tools_need_no_binding(world: World) -> None:
    """The era's own methods — ping (legacy), server/discover (2026-07-28) — work without any binding."""
    request = types.PingRequest() if world.era == "legacy" else types.DiscoverRequest()
    reply = world.conn.send(request)
    world.evidence.add(request.method, {"kind": reply.kind, "error": reply.error})
    assert reply.kind == "result", f"{request.method} without a binding answered {reply.said()}, not a result"


@check("wiring.list-in-one-page", "EMC-HP-017", uses=())
def test_granted_tools_come_in_one_page(world: World) -> None:
    """The granted tools are listed in one page, with no nextCursor."""
    reply = world.conn.list_tools(world.meta(world.scope))
    assert reply.kind == "result" and reply.result is not None, f"tools/list answered {reply.said()}, not a result"
    world.evidence.add("pages", reply.pages)
    assert reply.pages == 1 and "nextCursor" not in reply.result, (
        f"tools/list came in {reply.pages} page{'s' if reply.pages != 1 else ''}"
        + (", the last with a nextCursor" if "nextCursor" in reply.result else "")
        + ": the granted tools span several pages")


@check("wiring.order-of-checks", "EMC-HP-022",
       uses=(), cases={"invalid-and-wrong-purpose": (SEARCH,), "unknown-target-is-gated-first": (WITHDRAW,)})
@pytest.mark.parametrize("case", ["unbound-unknown-tool", "invalid-and-wrong-purpose", "unknown-target-is-gated-first"])
def test_checks_run_in_the_profiles_order(world: World, case: str) -> None:
    """The first failing step decides: binding, tool, arguments, purpose, idempotency, gate, execution."""
    if case == "unbound-unknown-tool":  # an unbound call needs no profile
        reply = world.conn.call("engram_memory_undefined_probe", {}, {})
        world.evidence.add("reply", {"kind": reply.kind, "code": reply.code})
        assert reply.kind == "error" and reply.error["code"] == UNTRUSTED.jsonrpc_code, (
            "the tool was judged before the binding"
        )
        return
    scope = world.scope
    if case == "invalid-and-wrong-purpose":
        arguments = {"query": "", "purpose_ref": world.profile.purpose_ref + "-other"}
        reply = world.call("engram_memory_search", arguments, scope=scope)
        world.evidence.add("reply", {"kind": reply.kind, "code": reply.code})
        assert reply.kind == "result" and reply.code == "INVALID_SCHEMA", "the purpose was judged before the arguments"
    else:
        principal = world.principal(scope, {"engram_memory_withdraw"})
        arguments = {
            "candidate_id": "candidate_" + "0" * 64,
            "idempotency_key": fresh_key(),
            "reason_ref": "reason:probe",
        }
        before = world.conn.elicitations
        if "server-initiated" not in world.profile.confirmation_modes:
            # By host reference only: a reference that approves nothing must stop the call before NOT_FOUND.
            reply = world.call("engram_memory_withdraw", arguments, scope=scope, principal=principal, answer="decline")
            world.evidence.add("reply", {"kind": reply.kind, "code": reply.code})
            assert reply.code == "gate_failed", "an unknown target was answered before the gate"
            return
        reply = world.call("engram_memory_withdraw", arguments, scope=scope, principal=principal, confirm=False)
        world.evidence.add("reply", {"kind": reply.kind, "code": reply.code})
        if world.era == "modern":
            assert reply.kind == "input_required", "an unknown target was answered before the gate"
        else:
            assert world.conn.elicitations == before + 1, "an unknown target was answered before the gate asked"
            assert reply.code == "NOT_FOUND", f"a call on an unknown target, confirmed, answered {reply.said()}"


@check("wiring.state-ignored-when-ungated", "EMC-HP-039", uses=SEARCH)
def test_confirmation_fields_are_ignored_on_ungated_calls(world: World) -> None:
    """request_state and input_responses on a call that needs no confirmation change nothing."""
    arguments = {"query": "ledger", "purpose_ref": world.profile.purpose_ref}
    meta = _offered_meta(world, "engram_memory_search")
    plain = world.conn.call("engram_memory_search", arguments, meta)
    decorated = world.conn.call("engram_memory_search", arguments, meta, request_state="not-a-state",
                                input_responses={CONFIRMATION_INPUT_KEY: {"action": "decline"}})
    world.evidence.add("kinds", [plain.kind, decorated.kind, plain.code, decorated.code])
    assert plain.kind == "result", f"a plain search answered {plain.said()}, not a result"
    assert decorated.kind == "result" and (decorated.envelope or {}).get("ok") is True, (
        f"a search with request_state and input_responses answered {decorated.said()}, not the plain search's success")


@check("wiring.ids-derive-upstream", "EMC-HP-043", "EMC-HP-044", "EMC-HP-042", uses=(CAPTURE, ADMIT))
def test_ids_derive_as_the_profile_says(world: World) -> None:
    """candidate_id follows the capture-identity scheme per principal; record_id is base32 of record_digest."""
    scope = world.scope
    principal = world.principal(scope, {"engram_memory_capture", "engram_memory_request_admission"})
    arguments, captured = world.capture(scope=scope, principal=principal)
    expected = capture_candidate_id(_binding_of(world, principal), arguments["idempotency_key"])
    world.evidence.add("candidate_id", {"sent": captured["candidate_id"], "expected": expected})
    assert captured["candidate_id"] == expected, (
        f"candidate_id {spoken(captured['candidate_id'])} is not the profile's capture identity "
        f"{spoken(expected)}")
    require("record_digest" in captured, "capture returned no record_digest")
    outcome = world.admit(captured["candidate_id"], scope=scope, principal=principal)
    require(outcome.get("status") == "accepted", "benign content was not accepted")
    assert outcome["record_id"] == record_id(captured["record_digest"]), (
        f"record_id {spoken(outcome['record_id'])} is not base32 of record_digest "
        f"({spoken(record_id(captured['record_digest']))})")


@check("wiring.digests-recompute", "EMC-HP-046", "EMC-HP-045", uses=(CAPTURE, ADMIT, GET))
def test_get_digests_recompute(world: World) -> None:
    """packet_digest, read_receipt.receipt_digest and the record's payload_digest recompute from what get returns."""
    rid, arguments = world.accepted_record()
    value = world.value(
        world.call("engram_memory_get", {"record_id": rid, "purpose_ref": world.profile.purpose_ref}), "get"
    )
    assert value["record"]["record_id"] == value["read_receipt"]["record_id"] == rid, "get returned another record's id"
    without = {k: v for k, v in value.items() if k != "packet_digest"}
    assert value["packet_digest"] == profile_digest("get-packet", without), "packet_digest does not recompute"
    receipt = value["read_receipt"]
    assert receipt["receipt_digest"] == profile_digest(
        "read-receipt", {k: v for k, v in receipt.items() if k != "receipt_digest"}
    ), "read_receipt.receipt_digest does not recompute"
    record = value["record"]
    if "/payload_digest" in value["redacted_fields"]:
        return
    scope = world.scope
    effective = {
        **arguments["payload"],
        "scope_ref": profile_digest("scope", {"tenant": scope.tenant, "workspace": scope.workspace}),
        "retention": {"derivative_rule": "make-ineligible"},
        "reconciliation": {"family_refs": []},
    }
    assert record["payload_digest"] == payload_digest(effective), "payload_digest is not the effective payload's"


@check("wiring.http-bearer", "EMC-HP-023", uses=())
def test_http_requires_the_host_bearer(harness: Run) -> None:
    """Over HTTP, a request without the bearer token or with a wrong one is HTTP 401 before any MCP processing."""
    if harness.target.kind != "http":
        not_applicable("the target is not served over HTTP")
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for authorization in (None, "Bearer wrong-token"):
        sent = dict(headers, **({"Authorization": authorization} if authorization else {}))
        response = httpx2.post(harness.target.url, json=body, headers=sent, timeout=harness.timeout)
        assert response.status_code == 401, f"{authorization or 'no bearer'}: HTTP {response.status_code}"
