"""Confirmation gates: which calls ask a human, what approves them, and that a refusal changes nothing.

The legacy era asks with an ``elicitation/create`` request sent while the call
is in flight; the 2026-07-28 era answers the call with an InputRequiredResult
and waits for the same call to come back with the answer and the server's
sealed ``request_state``. Every refusal is followed by a look at the target:
a candidate still pending, a record still readable, a key still free.
"""

from __future__ import annotations

import time
from typing import Any, cast

import pytest

from engram_mcp.conformance._background import in_background
from engram_mcp.conformance._checks import Blocked, check, needs_deep, not_applicable, pin, require
from engram_mcp.conformance._connect import Connection, Reply
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, GET, SEARCH, WITHDRAW
from engram_mcp.conformance._profile import ScopeProfile
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._tracker import Intent
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, refused_with
from engram_mcp.conformance.hosts import Answer
from engram_mcp.contract import load
from engram_mcp.contract.binding import CONFIRMATION_INPUT_KEY, CONFIRMATION_REQUESTED_SCHEMA

CONTRACT = load()
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]
REASON = "reason:conformance-gate"
# A state is answered this long after its TTL; a silent host stays silent this long after it. A TTL
# longer than _checks.SHORT_WAIT_SECONDS is waited out only with --deep (needs_deep).
EXPIRY_SLACK, SILENCE_SLACK = 0.5, 1.0


# -- calls, targets and answers ---------------------------------------------------


def outcome(reply: Reply) -> str:
    """One word for a reply: ok, the envelope code, the JSON-RPC code, input_required or timeout."""
    if reply.kind == "result":
        envelope = reply.envelope
        if isinstance(envelope, dict) and envelope.get("ok") is True:
            return "ok"
        return str(reply.code)
    if reply.kind == "error":
        return f"jsonrpc:{reply.code}"
    return reply.kind


def state_of(reply: Reply) -> str | None:
    return (reply.result or {}).get("requestState")


def offered_meta(world: World, tool: str, scope: ScopeProfile | None, principal: str | None) -> dict[str, Any]:
    """A valid binding for the call; SKIP when the target does not offer ``tool`` under it."""
    scope = scope or world.scope
    principal = principal or world.principal(scope, {tool})
    world._require_offered(tool, scope, principal)
    return world.host.meta(scope, principal)


def ask(
    world: World,
    tool: str,
    arguments: dict[str, Any],
    answer: Answer = "accept",
    *,
    scope: ScopeProfile | None = None,
    principal: str | None = None,
) -> tuple[bool, Reply]:
    """Send a call and answer the server's confirmation with ``answer``: (whether it asked, the final reply)."""
    meta = offered_meta(world, tool, scope, principal)
    stance = world.stance(answer)
    if world.era == "legacy":
        before = world.conn.elicitations
        reply = world.conn.call(tool, arguments, meta, answer=answer, intent=stance)
        return world.conn.elicitations > before, reply
    first = world.conn.call(tool, arguments, meta, intent=stance)
    if first.kind != "input_required":
        return False, first
    responses = world.confirmer.input_responses(answer)
    reply = world.conn.call(tool, arguments, meta, input_responses=responses, request_state=state_of(first),
                            intent=stance)
    return True, reply


def first_round(world: World, tool: str, arguments: dict[str, Any], *, scope: ScopeProfile | None = None,
                principal: str | None = None) -> tuple[dict[str, Any], str]:
    """2026-07-28: the unanswered call's (meta, request_state); BLOCKED when the server does not ask."""
    meta = offered_meta(world, tool, scope, principal)
    reply = world.conn.call(tool, arguments, meta)
    require(reply.kind == "input_required" and isinstance(state_of(reply), str),
            f"{tool} did not ask for a confirmation (got {outcome(reply)})")
    return meta, cast(str, state_of(reply))  # required to be a string above


def withdraw_arguments(candidate_id: str, key: str | None = None) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key or fresh_key(), "reason_ref": REASON}


def forget_arguments(record_id: str, key: str | None = None) -> dict[str, Any]:
    return {"record_id": record_id, "idempotency_key": key or fresh_key(), "reason_ref": REASON}


def pending_candidate(world: World, scope: ScopeProfile | None = None, principal: str | None = None) -> str:
    scope = scope or world.scope
    principal = principal or world.principal(scope, {CAPTURE})
    return world.capture(scope=scope, principal=principal)[1]["candidate_id"]


def target_for(world: World, tool: str) -> dict[str, Any]:
    """Fresh arguments for withdraw (a pending candidate) or forget (an accepted record) in the check's scope."""
    if tool == WITHDRAW:
        return withdraw_arguments(pending_candidate(world))
    return forget_arguments(world.accepted_record()[0])


def get_record(world: World, record_id: str) -> Reply:
    return world.call(GET, {"record_id": record_id, "purpose_ref": world.profile.purpose_ref})


def assert_unchanged(world: World, tool: str, arguments: dict[str, Any], *, scope: ScopeProfile | None = None,
                     principal: str | None = None) -> None:
    """After a refused gate, the target is as it was and the key is still free: the contract model judges the
    same call, approved now, as a first execution of it (and a forget's record as still readable before)."""
    if tool == FORGET:
        readable = get_record(world, arguments["record_id"])
        world.evidence.add("get_after_refusal", outcome(readable))
        world.expect(readable, "get of the record after a refused forget")
    asked, reply = ask(world, tool, arguments, "accept", scope=scope, principal=principal)
    world.evidence.add("approved_retry", {"asked": asked, "outcome": outcome(reply)})
    world.expect(reply, "the same call, approved after the refusal")
    require(outcome(reply) == "ok", f"the same call, approved after the refusal, answered {outcome(reply)}")


def gated_tools(scope: ScopeProfile) -> list[str]:
    tools = [WITHDRAW, FORGET]
    if scope.confirm_capture:
        tools.insert(0, CAPTURE)
    if scope.confirm_admission:
        tools.insert(1, ADMIT)
    return tools


def scope_gating(world: World, tool: str) -> ScopeProfile | None:
    """A scope where ``tool`` (capture or request_admission) is gated, with a principal granted it and capture."""
    for scope in world.profile.scopes:
        flag = scope.confirm_capture if tool == CAPTURE else scope.confirm_admission
        if scope.memory and flag and scope.principal_with({CAPTURE, tool}) is not None:
            return scope
    return None


def ttl_or_skip(world: World, scope: ScopeProfile) -> float:
    ttl = scope.confirmation_ttl_seconds
    # Not exercised (so the run is incomplete) unless --deep, or the profile makes the TTL short.
    needs_deep(ttl, f"waiting out the {ttl} s confirmation TTL of {scope.label}")
    return float(ttl)


def session_without_elicitation(harness: Run, era: str) -> Connection:
    """The run's one extra session per era that declares no elicitation capability."""
    try:
        return harness.session_without_elicitation(era)
    except Exception as problem:  # the target refusing a second session is a prerequisite, not a verdict
        raise Blocked(f"a second session without elicitation could not be opened ({type(problem).__name__})") from None


# The checks of the server-initiated mode (the server asks; the host answers). A profile that declares only
# the host-reference mode makes them not applicable: its checks are in test_confirmation_reference.py.
SERVER_INITIATED = frozenset({
    "test_an_approved_confirmation_runs_the_operation", "test_a_refused_confirmation_changes_nothing",
    "test_a_confirmation_not_given_in_time_fails", "test_a_retry_without_a_valid_state_is_not_confirmed",
    "test_a_state_minted_for_another_operation_is_refused", "test_a_policy_gated_mutation_asks_and_honours_a_refusal",
    "test_a_completed_mutation_replays_without_asking", "test_a_state_is_used_once",
})


@pytest.fixture(autouse=True)
def _server_initiated_declared(request: pytest.FixtureRequest) -> None:
    if request.function.__name__ in SERVER_INITIATED:
        world: World = request.getfixturevalue("world")
        if "server-initiated" not in world.profile.confirmation_modes:
            not_applicable("the profile does not declare the server-initiated confirmation mode")


# -- approval ------------------------------------------------------------------------


@check("gate.approval-runs", "EMC-GATE-001", "EMC-HP-025", "EMC-HP-028", "EMC-HP-032", "EMC-HP-033", "EMC-HP-070",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_an_approved_confirmation_runs_the_operation(world: World, tool: str) -> None:
    """withdraw and forget ask once (an elicitation, or an InputRequiredResult with the form) and run when approved."""
    arguments = target_for(world, tool)
    if world.era == "legacy":
        before = world.conn.elicitations
        reply = world.call(tool, arguments, answer="accept")
        world.expect(reply, f"an approved {tool.removeprefix('engram_memory_')}")
        asked = world.conn.elicitations - before
        world.evidence.add("elicitations", asked)
        assert asked == 1, f"the server sent {asked} elicitation requests for one {tool} call, not one"
    else:
        meta = offered_meta(world, tool, None, None)
        first = world.conn.call(tool, arguments, meta)
        world.evidence.add("first_round", outcome(first))
        assert first.kind == "input_required", f"{tool} ran without asking for a confirmation ({outcome(first)})"
        requests = first.result.get("inputRequests") or {}
        world.evidence.add("input_request_keys", sorted(requests))
        assert sorted(requests) == [CONFIRMATION_INPUT_KEY], "the input request is not the single confirmation key"
        request = requests[CONFIRMATION_INPUT_KEY]
        params = request.get("params") or {}
        schema = params.get("requestedSchema") or {}
        assert request.get("method") == "elicitation/create", "the confirmation is not an elicitation/create request"
        assert params.get("mode") == "form", "the confirmation is not a form-mode elicitation"
        assert schema == CONFIRMATION_REQUESTED_SCHEMA, "requestedSchema is not the profile's confirmation form"
        message = str(params.get("message", ""))
        leaked = [v for v in arguments.values() if isinstance(v, str) and v in message]
        pin("EMC-HP-070", not leaked, "the confirmation message repeats argument text")
        assert isinstance(state_of(first), str) and state_of(first), "no requestState came with the input request"
        reply = world.conn.call(tool, arguments, meta, input_responses=world.confirmer.input_responses("accept"),
                                request_state=state_of(first), intent=world.stance())
    world.evidence.add("outcome", outcome(reply))
    world.expect(reply, f"an approved {tool.removeprefix('engram_memory_')}")


# -- refusals --------------------------------------------------------------------------


@check("gate.refusal", "EMC-GATE-001", "EMC-HP-029", "EMC-HP-030",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.parametrize("answer", ["decline", "cancel", "accept_false"])
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_refused_confirmation_changes_nothing(world: World, tool: str, answer: Answer) -> None:
    """A declined, cancelled or unchecked confirmation ends in gate_failed, and the target and the key are untouched."""
    arguments = target_for(world, tool)
    asked, reply = ask(world, tool, arguments, answer)
    world.evidence.add("refusal", {"asked": asked, "outcome": outcome(reply)})
    assert asked, f"{tool} ran without asking for a confirmation"
    world.expect(reply, f"a {tool.removeprefix('engram_memory_')} whose confirmation got a {answer} answer")
    assert_unchanged(world, tool, arguments)


UNANSWERED = "gate.unanswered"


@check(UNANSWERED, "EMC-GATE-001", "EMC-GATE-004", "EMC-HP-032", "EMC-HP-037", uses=(CAPTURE, WITHDRAW))
def test_a_confirmation_not_given_in_time_fails(harness: Run, world: World) -> None:
    """Legacy: no answer within the TTL is gate_failed. 2026-07-28: a state answered after its TTL is gate_failed.
    Mostly a wait for the TTL: it runs on a session of its own beside the other waiting checks (_background)."""
    harness.background.take(UNANSWERED, world)


@in_background(UNANSWERED)
def confirmation_not_given_in_time(world: World) -> None:
    scope = world.scope
    ttl = ttl_or_skip(world, scope)
    arguments = withdraw_arguments(pending_candidate(world))
    if world.era == "legacy":
        previous = world.conn.silence_seconds
        world.conn.silence_seconds = ttl + SILENCE_SLACK
        try:
            asked, reply = ask(world, WITHDRAW, arguments, "silence")
        finally:
            world.conn.silence_seconds = previous
        world.evidence.add("silence", {"asked": asked, "outcome": outcome(reply), "elapsed": round(reply.elapsed, 2),
                                       "ttl": ttl})
        require(asked, "withdraw did not ask for a confirmation")
        world.expect(reply, "a withdraw whose confirmation was never answered")
        assert reply.elapsed < ttl + SILENCE_SLACK * 0.75, (
            f"the server waited {reply.elapsed:.1f} s for an answer, past the scope's {ttl:.0f} s TTL")
    else:
        # Made inside the check (not ahead of it): the pending candidate and the first round's binding stay fresh,
        # so the late approval differs from a timely one by its lateness alone.
        meta, state = first_round(world, WITHDRAW, arguments)
        time.sleep(ttl + EXPIRY_SLACK)
        reply = world.conn.call(WITHDRAW, arguments, meta, input_responses=world.confirmer.input_responses("accept"),
                                request_state=state, intent=LATE)
        world.evidence.add("expired_state", {"waited": ttl + EXPIRY_SLACK, "outcome": outcome(reply)})
        world.expect(reply, "a withdraw approved after its confirmation's TTL")
    assert_unchanged(world, WITHDRAW, arguments)


# Each way a retry breaks its confirmation, in the words a verdict uses: what the harness changed.
FORGED_STATE_WORDS = {
    "no-state": "no request_state", "garbage-state": "a request_state that is no sealed state",
    "tampered-state": "a request_state with one character changed",
    "missing-answer-key": "no answer under the confirmation key",
    "confirm-string": "confirm given as the string 'true', not the boolean",
    "accept-extra-content": "an approval carrying a member beyond confirm",
}
FORGED_STATES = list(FORGED_STATE_WORDS)
LATE = Intent(confirmation="declined")  # an approval that is no confirmation: late, forged, or for something else


@check("gate.forged-state", "EMC-GATE-001", "EMC-HP-026", "EMC-HP-029", "EMC-HP-034", "EMC-HP-037",
       uses=(CAPTURE, WITHDRAW), eras="modern")
@pytest.mark.parametrize("forgery", FORGED_STATES)
def test_a_retry_without_a_valid_state_is_not_confirmed(world: World, forgery: str) -> None:
    """2026-07-28: a retry lacking, forging or altering the state, or not approving, is gate_failed."""
    if world.era != "modern":
        not_applicable("request_state exists only in the 2026-07-28 era")
    arguments = withdraw_arguments(pending_candidate(world))
    meta, state = first_round(world, WITHDRAW, arguments)
    approve = world.confirmer.input_responses("accept")
    responses: dict[str, Any] = approve
    sent_state: str | None = state
    if forgery == "no-state":
        sent_state = None
    elif forgery == "garbage-state":
        sent_state = "AAAA" + "B" * 60
    elif forgery == "tampered-state":
        middle = len(state) // 2
        sent_state = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1:]
    elif forgery == "missing-answer-key":
        responses = {}
    elif forgery == "confirm-string":
        responses = {CONFIRMATION_INPUT_KEY: {"action": "accept", "content": {"confirm": "true"}}}
    elif forgery == "accept-extra-content":
        responses = {CONFIRMATION_INPUT_KEY: {"action": "accept", "content": {"confirm": True, "scope": "all"}}}
    reply = world.conn.call(WITHDRAW, arguments, meta, input_responses=responses, request_state=sent_state,
                            intent=LATE)
    world.evidence.add("forged_retry", outcome(reply))
    world.expect(reply, f"a withdraw retried with {FORGED_STATE_WORDS[forgery]}")
    assert_unchanged(world, WITHDRAW, arguments)


@check("gate.reused-state", "EMC-HP-038", uses=(CAPTURE, WITHDRAW), eras="modern")
def test_a_state_is_used_once(world: World) -> None:
    """2026-07-28: a state answered once (declined) confirms nothing when answered again, approving."""
    if world.era != "modern":
        not_applicable("request_state exists only in the 2026-07-28 era")
    arguments = withdraw_arguments(pending_candidate(world))
    meta, state = first_round(world, WITHDRAW, arguments)
    burnt = world.conn.call(WITHDRAW, arguments, meta, input_responses=world.confirmer.input_responses("decline"),
                            request_state=state, intent=LATE)
    world.evidence.add("declined_first", outcome(burnt))
    world.expect(burnt, "a withdraw whose confirmation was declined")
    reply = world.conn.call(WITHDRAW, arguments, meta, input_responses=world.confirmer.input_responses("accept"),
                            request_state=state, intent=Intent(confirmation="unknown"))
    world.evidence.add("reused_state", outcome(reply))
    assert outcome(reply) == "gate_failed", f"a spent state, answered again approving, gave {outcome(reply)}"
    assert_unchanged(world, WITHDRAW, arguments)


def two_principals_sharing_a_gate(world: World) -> tuple[ScopeProfile, str, str, str] | None:
    """(scope, gated tool, p1, p2): two principals granted the same gated tool in one scope."""
    order = [CAPTURE, WITHDRAW, ADMIT, FORGET]
    for scope in world.profile.scopes:
        if not scope.memory:
            continue
        gated = gated_tools(scope)
        for tool in sorted(gated, key=order.index):
            needs = {tool} | ({CAPTURE} if tool != CAPTURE else set()) | ({ADMIT} if tool == FORGET else set())
            holders = sorted(p for p, granted in scope.principals.items() if tool in granted)
            makers = [p for p in holders if needs <= scope.principals[p]]
            if len(holders) >= 2 and makers:
                p1 = makers[0]
                return scope, tool, p1, next(p for p in holders if p != p1)
    return None


def arguments_in(world: World, scope: ScopeProfile, tool: str, principal: str) -> dict[str, Any]:
    """Arguments for ``tool`` on a fresh target in ``scope``, made by ``principal``
    (confirming where the scope asks)."""
    if tool == CAPTURE:
        return capture_arguments(world.profile.purpose_ref)
    candidate = pending_candidate(world, scope, principal)
    if tool == WITHDRAW:
        return withdraw_arguments(candidate)
    if tool == ADMIT:
        return {"candidate_id": candidate, "idempotency_key": fresh_key()}
    admitted = world.admit(candidate, scope=scope, principal=principal)
    if admitted.get("status") != "accepted":
        raise Blocked(f"admission in {scope.label} was {spoken(admitted.get('status'))}, not accepted")
    return forget_arguments(admitted["record_id"])


@check("gate.state-for-another-operation", "EMC-GATE-003", "EMC-HP-027", "EMC-HP-037",
       uses=(CAPTURE, WITHDRAW), eras="modern")
@pytest.mark.parametrize("other", ["target", "arguments", "principal", "session"])
def test_a_state_minted_for_another_operation_is_refused(world: World, other: str) -> None:
    """2026-07-28: a state answered for another target, arguments, principal or session is gate_failed."""
    if world.era != "modern":
        not_applicable("request_state exists only in the 2026-07-28 era")
    approve = world.confirmer.input_responses("accept")
    if other == "principal":
        found = two_principals_sharing_a_gate(world)
        if found is None:
            pytest.skip("no scope of the profile grants one gated tool to two principals")
        scope, tool, p1, p2 = found
        arguments = arguments_in(world, scope, tool, p1)
        _, state = first_round(world, tool, arguments, scope=scope, principal=p1)
        reply = world.conn.call(tool, arguments, world.meta(scope, p2), input_responses=approve, request_state=state,
                                intent=LATE)
        world.evidence.add("case", {"scope": scope.label, "tool": tool, "outcome": outcome(reply)})
        require(reply.kind != "error", f"{p2}'s call with {p1}'s state was refused {outcome(reply)}: the profile may "
                "not grant it the same tool")
        world.expect(reply, f"{p2}'s {tool.removeprefix('engram_memory_')} with a state minted for {p1}")
        assert_unchanged(world, tool, arguments, scope=scope, principal=p2)
        return
    arguments = withdraw_arguments(pending_candidate(world))
    if other == "session":
        # The same principal, scope and arguments, bound by the host to another of its sessions.
        _, state = first_round(world, WITHDRAW, arguments)
        scope = world.scope
        meta = world.host.meta(scope, world.principal(scope, {WITHDRAW}), session="conformance-other-session")
        reply = world.conn.call(WITHDRAW, arguments, meta, input_responses=approve, request_state=state, intent=LATE)
        world.evidence.add("foreign_state", outcome(reply))
        world.expect(reply, "a withdraw with a state minted in another host session")
        assert_unchanged(world, WITHDRAW, arguments)
        return
    if other == "target":
        elsewhere = withdraw_arguments(pending_candidate(world))
    else:
        elsewhere = {**arguments, "reason_ref": REASON + "-other"}
    meta, _ = first_round(world, WITHDRAW, arguments)
    _, foreign = first_round(world, WITHDRAW, elsewhere)
    reply = world.conn.call(WITHDRAW, arguments, meta, input_responses=approve, request_state=foreign, intent=LATE)
    world.evidence.add("foreign_state", outcome(reply))
    world.expect(reply, f"a withdraw with a state minted for other {other}")
    assert_unchanged(world, WITHDRAW, arguments)


# -- a host that cannot confirm at all ---------------------------------------------------


@check("gate.no-confirmation-channel", "EMC-GATE-008", "EMC-HP-031", "EMC-HP-067",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.engram_sessions("without-elicitation")
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_host_without_elicitation_gets_the_protocol_error(world: World, harness: Run, tool: str) -> None:
    """A session without elicitation cannot confirm: withdraw and forget are -32603, and nothing changes."""
    arguments = target_for(world, tool)
    conn = session_without_elicitation(harness, world.era)
    before = conn.elicitations
    scope = world.scope
    reply = conn.call(tool, arguments, world.host.meta(scope, world.principal(scope, {tool})))
    world.evidence.add("reply", {"kind": reply.kind, "error": reply.error, "code": reply.code})
    assert conn.elicitations == before, "the server sent an elicitation to a client that declared none"
    what = f"a {tool.removeprefix('engram_memory_')} from a session that cannot be asked to confirm"
    world.expect(reply, what)
    refused_with(reply, "trusted_context_unavailable", what)
    assert_unchanged(world, tool, arguments)


# -- approval the agent tries to give itself ------------------------------------------------


@check("gate.self-approval", "EMC-GATE-006", "EMC-HP-020", "EMC-HP-022",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.parametrize("field", ["confirmed", "elicitationRef", "confirmation", "confirm"])
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_an_argument_claiming_approval_is_invalid(world: World, tool: str, field: str) -> None:
    """confirmed, elicitationRef and the like as arguments are INVALID_SCHEMA, never an approval, and change nothing."""
    claim = {"confirmed": True, "elicitationRef": "elicitation:approved-1", "confirmation": {"confirm": True},
             "confirm": True}[field]
    arguments = target_for(world, tool)
    before = world.conn.elicitations
    reply = world.conn.call(tool, {**arguments, field: claim}, offered_meta(world, tool, None, None), answer="accept",
                            intent=world.stance())
    asked = world.conn.elicitations > before or reply.kind == "input_required"
    world.evidence.add("reply", {"asked": asked, "outcome": outcome(reply)})
    if reply.kind == "input_required":  # asked first (allowed; this profile judges arguments first): answer it
        reply = world.conn.call(tool, {**arguments, field: claim}, offered_meta(world, tool, None, None),
                                input_responses=world.confirmer.input_responses("accept"),
                                request_state=state_of(reply), intent=world.stance())
    world.expect(reply, f"a {tool.removeprefix('engram_memory_')} whose arguments claim approval ({field})")
    assert outcome(reply) == "INVALID_SCHEMA", (
        f"an argument {spoken(field)} gave {outcome(reply)}, not INVALID_SCHEMA")
    pin("EMC-HP-022", not asked, "the server asked for a confirmation before refusing the arguments")
    assert_unchanged(world, tool, arguments)


# -- gates chosen by the host's policy -------------------------------------------------------


@check("gate.policy-gated", "EMC-GATE-002", "EMC-HP-025", "EMC-HP-030", uses=(CAPTURE, CASE_TOOL))
@pytest.mark.parametrize("tool", [CAPTURE, ADMIT])
def test_a_policy_gated_mutation_asks_and_honours_a_refusal(world: World, tool: str) -> None:
    """In a scope whose policy gates capture or request_admission the call asks; declined it fails, approved it runs."""
    scope = world.need(scope_gating(world, tool), "gated-capture" if tool == CAPTURE else "gated-admission")
    principal = world.principal(scope, {CAPTURE, tool})
    arguments = arguments_in(world, scope, tool, principal)
    asked, refused = ask(world, tool, arguments, "decline", scope=scope, principal=principal)
    world.evidence.add("declined", {"scope": scope.label, "asked": asked, "outcome": outcome(refused)})
    assert asked, f"{tool} ran in {scope.label} without the confirmation its policy requires"
    world.expect(refused, f"a declined {tool.removeprefix('engram_memory_')} in {scope.label}")
    asked, approved = ask(world, tool, arguments, "accept", scope=scope, principal=principal)
    world.evidence.add("approved", {"asked": asked, "outcome": outcome(approved)})
    world.expect(approved, f"the same {tool.removeprefix('engram_memory_')}, approved")


@check("gate.ungated-calls", "EMC-GATE-002", "EMC-HP-025",
       uses=CASE_TOOL, cases={ADMIT: (CAPTURE,), GET: (CAPTURE, ADMIT)})
@pytest.mark.parametrize("tool", [CAPTURE, ADMIT, SEARCH, GET])
def test_an_ungated_call_does_not_ask(world: World, tool: str) -> None:
    """Where the policy gates nothing, capture and request_admission run without asking; search and get never ask."""
    scope = world.scope
    require(not scope.confirm_capture and not scope.confirm_admission, "the check's scope gates capture or admission")
    principal = world.principal(scope, world.tools)
    if tool == CAPTURE:
        arguments = capture_arguments(world.profile.purpose_ref)
    elif tool == ADMIT:
        arguments = {"candidate_id": pending_candidate(world, scope, principal), "idempotency_key": fresh_key()}
    elif tool == SEARCH:
        arguments = {"query": "ledger database", "purpose_ref": world.profile.purpose_ref}
    else:
        arguments = {"record_id": world.accepted_record()[0], "purpose_ref": world.profile.purpose_ref}
    # Declining whatever is asked: a call that asks cannot succeed by accident.
    asked, reply = ask(world, tool, arguments, "decline", scope=scope, principal=principal)
    world.evidence.add("reply", {"asked": asked, "outcome": outcome(reply)})
    assert not asked, f"{tool} asked for a confirmation in a scope that gates nothing"
    world.expect(reply, f"{tool.removeprefix('engram_memory_')} in a scope that gates nothing")
    assert outcome(reply) == "ok", f"{tool} did not succeed ({outcome(reply)})"


# -- replays ------------------------------------------------------------------------------------


@check("gate.replay-not-reconfirmed", "EMC-IDEM-011", "EMC-HP-041", "EMC-HP-022",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT,)})
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_completed_mutation_replays_without_asking(world: World, tool: str) -> None:
    """The same key and arguments after an approved withdraw or forget replay the stored result and ask nothing."""
    arguments = target_for(world, tool)
    meta = offered_meta(world, tool, None, None)
    if world.era == "legacy":
        first = world.conn.call(tool, arguments, meta, answer="accept", intent=world.stance())
        state, responses = None, None
    else:
        asked = world.conn.call(tool, arguments, meta, intent=world.stance())
        require(asked.kind == "input_required", f"{tool} did not ask for a confirmation")
        state, responses = state_of(asked), world.confirmer.input_responses("accept")
        first = world.conn.call(tool, arguments, meta, input_responses=responses, request_state=state,
                                intent=world.stance())
    require(outcome(first) == "ok", f"the approved {tool} failed ({outcome(first)})")
    # Declining anything asked: a replay must not ask, so it cannot fail the gate.
    asked_again, replay = ask(world, tool, arguments, "decline")
    world.evidence.add("replay", {"asked": asked_again, "outcome": outcome(replay)})
    pin("EMC-HP-041", not asked_again, "the replay of a completed mutation asked for a confirmation again")
    world.expect(replay, f"the same {tool.removeprefix('engram_memory_')} again, its confirmation declined")
    pin("EMC-HP-041", outcome(replay) == "ok", f"the replay, its confirmation declined, gave {outcome(replay)}")
    if state is not None:
        # The spent state with its approval again: the key's stored outcome, never a second run.
        again = world.conn.call(tool, arguments, meta, input_responses=responses, request_state=state,
                                intent=Intent(confirmation="unknown"))
        world.evidence.add("state_resent", outcome(again))
        world.expect(again, "the same call with its spent state and approval again")
        pin("EMC-HP-041", outcome(again) == "ok", f"resending the spent state with the same key gave "
            f"{outcome(again)}, not the replay")
