"""Host-reference confirmation: the host obtains the approval and vouches for it in the call's ``_meta``.

The checks run when the profile declares the ``host-reference`` mode, in both
eras alike (the reference travels in the request itself). Each refusal is
followed by a look at the target and a retry with a good reference, which must
run as a first execution: a refused reference reserves nothing. Times are
chosen with margins of the binding clock skew, so that a server whose clock
differs by that much judges every case the same way.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from engram_mcp.conformance._checks import check, not_applicable, pin, require
from engram_mcp.conformance._connect import Connection, Reply
from engram_mcp.conformance._host import ConfirmationReferences, ReferenceFlaw
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, GET, WITHDRAW
from engram_mcp.conformance._profile import NEEDS_PROFILE, ScopeProfile
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._tracker import Intent
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, refused_with
from engram_mcp.conformance.suite.test_gates import (
    get_record,
    outcome,
    pending_candidate,
    scope_gating,
    session_without_elicitation,
    target_for,
    withdraw_arguments,
)
from engram_mcp.contract import load

CONTRACT = load()
EXECUTE_WITHIN = CONTRACT.limit("confirmation.execute_within")
SKEW = CONTRACT.limit("binding.clock_skew")
TTL_MAX = CONTRACT.limit("confirmation.ttl.max")
# Older than the window on any clock within the skew; well inside it on any such clock.
STALE_APPROVAL = EXECUTE_WITHIN + SKEW + 1
FRESH_APPROVAL = EXECUTE_WITHIN - SKEW - 5
# Lifetimes that keep both references far from expiry when they are used.
FRESH_LIFETIME = FRESH_APPROVAL + 3 * SKEW
STALE_LIFETIME = STALE_APPROVAL + 3 * SKEW


# -- sending a call with a reference ---------------------------------------------------------


def references(world: World) -> ConfirmationReferences:
    """The host's reference minter; not applicable when the profile does not declare the mode."""
    if not world.profile.given:
        pytest.skip(f"{NEEDS_PROFILE}: a host key to sign confirmation references")
    if "host-reference" not in world.profile.confirmation_modes or world.references is None:
        not_applicable("the profile does not declare the host-reference confirmation mode")
    return world.references


def send(world: World, tool: str, arguments: dict[str, Any], reference: dict[str, Any], *,
         scope: ScopeProfile | None = None, principal: str | None = None,
         conn: Connection | None = None, valid: bool | None = None) -> tuple[bool, Reply]:
    """The call bound by the host and carrying ``reference``: (whether the server asked anything, the reply).

    Anything the server asks is declined, so a server that asks cannot succeed by the answer. ``valid`` is what
    the host knows of its reference: one that approves exactly this call (True), one that approves nothing
    (False), or one whose acceptance the contract leaves to the server (None)."""
    scope = scope or world.scope
    principal = principal or world.principal(scope, {tool})
    world._require_offered(tool, scope, principal)
    conn = conn or world.conn
    before = conn.elicitations
    stance = Intent(confirmation="approved" if valid else "declined" if valid is False else "unknown",
                    reference=True) if reference else None
    reply = conn.call(tool, arguments, {**world.host.meta(scope, principal), **reference}, answer="decline",
                      as_host=False, intent=stance)
    return conn.elicitations > before or reply.kind == "input_required", reply


def approved(world: World, tool: str, arguments: dict[str, Any], *, scope: ScopeProfile | None = None,
             principal: str | None = None, **approval: Any) -> dict[str, Any]:
    """A valid reference for exactly this call."""
    scope = scope or world.scope
    principal = principal or world.principal(scope, {tool})
    return references(world).approve(scope, principal, tool, arguments, **approval)


def confirm_runs(world: World, tool: str, arguments: dict[str, Any], what: str, *, scope: ScopeProfile | None = None,
                 principal: str | None = None, **approval: Any) -> dict[str, Any]:
    """Send the call with a good reference; it must run as a first execution, asking nothing. Its value."""
    asked, reply = send(world, tool, arguments, approved(world, tool, arguments, scope=scope, principal=principal,
                                                         **approval), scope=scope, principal=principal, valid=True)
    world.evidence.add(what, {"asked": asked, "outcome": outcome(reply)})
    pin("EMC-HP-061", not asked, "the server asked the client for a confirmation although the call carried a "
                                 "reference")
    world.expect(reply, f"{what}: the call with a valid reference")
    require(outcome(reply) == "ok", f"{what}: the call with a valid reference answered {outcome(reply)}")
    value: dict[str, Any] = reply.envelope["output"]["value"]
    return value


def assert_refused_and_unchanged(world: World, tool: str, arguments: dict[str, Any], reply: tuple[bool, Reply],
                                 what: str, *, scope: ScopeProfile | None = None, principal: str | None = None) -> None:
    """The refusal ran nothing (the contract model judges it), asked nothing, and left the target and the key as
    they were: the same call with a good reference is a first execution."""
    asked, refused = reply
    world.evidence.add(what, {"asked": asked, "outcome": outcome(refused)})
    pin("EMC-HP-061", not asked, "the server asked the client for a confirmation although the call carried a "
                                 "reference")
    world.expect(refused, f"a {tool.removeprefix('engram_memory_')} carrying a {what.replace('_', ' ')}")
    if tool == FORGET:
        readable = get_record(world, arguments["record_id"])
        world.evidence.add("get_after_refusal", outcome(readable))
        world.expect(readable, "get of the record after a refused forget")
    confirm_runs(world, tool, arguments, "retry_with_good_reference", scope=scope, principal=principal)


# -- approval -----------------------------------------------------------------------------------


@check("confirmation-ref.approval-runs", "EMC-GATE-001", "EMC-HP-060", "EMC-HP-061", "EMC-HP-062", "EMC-HP-063",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_valid_reference_runs_the_operation(world: World, tool: str) -> None:
    """withdraw and forget with a valid reference run at once, as first executions, and the server asks nothing."""
    arguments = target_for(world, tool)
    confirm_runs(world, tool, arguments, "with_reference")
    if tool == FORGET:
        gone = get_record(world, arguments["record_id"])
        world.evidence.add("get_after_forget", outcome(gone))
        world.expect(gone, "get of the record after the confirmed forget")


@check("confirmation-ref.policy-gated", "EMC-GATE-002", "EMC-HP-061", "EMC-HP-064",
       uses=(CAPTURE, CASE_TOOL), cases={CAPTURE: (), ADMIT: ()})
@pytest.mark.parametrize("tool", [CAPTURE, ADMIT])
def test_a_policy_gated_mutation_runs_with_a_reference(world: World, tool: str) -> None:
    """Where policy gates capture or request_admission, a reference for another call is refused and a good one runs."""
    references(world)
    scope = world.need(scope_gating(world, tool), "gated-capture" if tool == CAPTURE else "gated-admission")
    principal = world.principal(scope, {CAPTURE, tool})
    if tool == CAPTURE:
        arguments = capture_arguments(world.profile.purpose_ref)
        other = {**arguments, "idempotency_key": fresh_key()}
    else:
        made = capture_arguments(world.profile.purpose_ref)
        made_reply = send(world, CAPTURE, made, approved(world, CAPTURE, made, scope=scope, principal=principal),
                          scope=scope, principal=principal, valid=True)[1]
        candidate = world.value(made_reply, "capture in the gated scope")["candidate_id"]
        arguments = {"candidate_id": candidate, "idempotency_key": fresh_key()}
        other = {**arguments, "idempotency_key": fresh_key()}
    wrong = approved(world, tool, other, scope=scope, principal=principal)
    reply = send(world, tool, arguments, wrong, scope=scope, principal=principal, valid=False)
    assert_refused_and_unchanged(world, tool, arguments, reply, "reference_for_other_call", scope=scope,
                                 principal=principal)


# -- references a server must refuse ------------------------------------------------------------


@check("confirmation-ref.forged", "EMC-GATE-001", "EMC-HP-062", "EMC-HP-064",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.parametrize("flaw", ["forged_signature", "untrusted_key", "binding_token", "garbage"])
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_forged_reference_is_refused(world: World, tool: str, flaw: str) -> None:
    """A reference with a signature that does not verify, an untrusted key, the binding's type, or no JWS at all."""
    refs = references(world)
    arguments = target_for(world, tool)
    scope = world.scope
    principal = world.principal(scope, {tool})
    if flaw == "garbage":
        reference = {next(iter(refs.approve(scope, principal, tool, arguments))): "not-a-reference"}
    else:
        flawed = cast(ReferenceFlaw, flaw)  # garbage is handled above
        reference = refs.flawed(flawed, scope, principal, tool, arguments)
    reply = send(world, tool, arguments, reference, valid=False)
    assert_refused_and_unchanged(world, tool, arguments, reply, f"{flaw}_reference")


def refuse_flawed(world: World, flaw: ReferenceFlaw, *, pinned: str | None = None) -> None:
    """A withdraw with a reference the host broke this way is gate_failed, and changes nothing. ``pinned``: a flaw
    only this profile refuses (the contract lets the server accept it), judged as that pin."""
    refs = references(world)
    arguments = withdraw_arguments(pending_candidate(world))
    scope = world.scope
    reference = refs.flawed(flaw, scope, world.principal(scope, {WITHDRAW}), WITHDRAW, arguments)
    reply = send(world, WITHDRAW, arguments, reference, valid=None if pinned else False)
    if pinned is not None:
        world.expect(reply[1], f"a withdraw carrying a {flaw.replace('_', ' ')} reference")
        if not pin(pinned, outcome(reply[1]) == "gate_failed",
                   f"a withdraw with a {flaw.replace('_', ' ')} reference gave {outcome(reply[1])}, not gate_failed"):
            return
    assert_refused_and_unchanged(world, WITHDRAW, arguments, reply, f"{flaw}_reference")


@check("confirmation-ref.expired", "EMC-GATE-001", "EMC-GATE-004", "EMC-HP-064", uses=(CAPTURE, WITHDRAW))
def test_an_expired_reference_is_refused(world: World) -> None:
    """A reference past its exp (by more than the clock skew), approved within the execution window, is gate_failed."""
    refuse_flawed(world, "expired")


@check("confirmation-ref.ttl-ceiling", "EMC-GATE-004", "EMC-HP-063", "EMC-HP-064", uses=(CAPTURE, WITHDRAW))
def test_a_reference_valid_longer_than_the_ceiling_is_refused(world: World) -> None:
    """A fresh reference whose exp lies more than confirmation.ttl.max after its approval is gate_failed; so is one
    a second over the profile's reference_ttl_seconds, when the profile declares less than the ceiling."""
    refuse_flawed(world, "too_long_lived")
    declared = world.profile.reference_ttl_seconds
    world.evidence.add("declared_ttl", declared)
    if declared < TTL_MAX and "over_declared_ttl" in references(world).flaws:
        # A TTL the server chose below the contract's ceiling is its own configuration: refusing beyond it is this
        # profile's rule, judged as its pin.
        refuse_flawed(world, "over_declared_ttl", pinned="EMC-HP-064")


OTHER_OPERATIONS = ["capability", "target", "operation"]


@check("confirmation-ref.other-operation", "EMC-GATE-003", "EMC-HP-064",
       uses=(CAPTURE, WITHDRAW), cases={"capability": (FORGET,)})
@pytest.mark.parametrize("other", OTHER_OPERATIONS)
def test_a_reference_for_another_operation_is_refused(world: World, other: str) -> None:
    """A good reference for forget, for another candidate, or for the same one under another key is gate_failed."""
    references(world)
    arguments = withdraw_arguments(pending_candidate(world))
    if other == "capability":  # the same arguments, approved for another tool
        reference = approved(world, FORGET, arguments)
    elif other == "target":
        reference = approved(world, WITHDRAW, withdraw_arguments(pending_candidate(world)))
    else:  # same target, another idempotency key: another operation digest
        reference = approved(world, WITHDRAW, {**arguments, "idempotency_key": fresh_key()})
    reply = send(world, WITHDRAW, arguments, reference, valid=False)
    assert_refused_and_unchanged(world, WITHDRAW, arguments, reply, f"reference_for_other_{other}")


def spent_reference(world: World) -> dict[str, Any]:
    """A reference that has just confirmed a withdraw (the withdraw ran)."""
    refs = references(world)
    scope = world.scope
    first_arguments = withdraw_arguments(pending_candidate(world))
    first = refs.approve(scope, world.principal(scope, {WITHDRAW}), WITHDRAW, first_arguments)
    asked, ran = send(world, WITHDRAW, first_arguments, first, valid=True)
    world.evidence.add("first_use", {"asked": asked, "outcome": outcome(ran)})
    world.expect(ran, "the first use of a valid reference")
    require(outcome(ran) == "ok", f"the first use of a valid reference did not run ({outcome(ran)})")
    return first


@check("confirmation-ref.reused-token", "EMC-GATE-003", uses=(CAPTURE, WITHDRAW))
def test_a_spent_reference_confirms_no_other_operation(world: World) -> None:
    """After a reference ran a withdraw, the same token confirms no withdraw of another candidate: it names
    another target."""
    first = spent_reference(world)
    arguments = withdraw_arguments(pending_candidate(world))
    reply = send(world, WITHDRAW, arguments, first, valid=False)
    assert_refused_and_unchanged(world, WITHDRAW, arguments, reply, "reused_token")


@check("confirmation-ref.reused-id", "EMC-HP-065", uses=(CAPTURE, WITHDRAW))
def test_a_reference_id_is_used_once(world: World) -> None:
    """A reference valid in every claim for a new withdraw, but reusing a spent approval id, is gate_failed."""
    refs = references(world)
    scope = world.scope
    principal = world.principal(scope, {WITHDRAW})
    spent = _claims(next(iter(spent_reference(world).values())))["jti"]
    arguments = withdraw_arguments(pending_candidate(world))
    reference = refs.approve(scope, principal, WITHDRAW, arguments, jti=spent)
    reply = send(world, WITHDRAW, arguments, reference, valid=None)
    world.evidence.add("reused_id", outcome(reply[1]))
    world.expect(reply[1], "a withdraw carrying a reference that reuses a spent approval id")
    assert outcome(reply[1]) == "gate_failed", f"a reused approval id gave {outcome(reply[1])}, not gate_failed"
    assert_refused_and_unchanged(world, WITHDRAW, arguments, reply, "reused_id")


def _claims(token: str) -> dict[str, Any]:
    """The unverified claims of a compact JWS the harness minted itself."""
    import base64
    import json

    payload = token.split(".")[1]
    return dict(json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))))


@check("confirmation-ref.execution-window", "EMC-GATE-005", "EMC-HP-066",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_an_approval_older_than_the_window_is_refused(world: World, tool: str) -> None:
    """An approval older than confirmation.execute_within is gate_failed; one well inside the window runs.

    Only a host reference carries the moment of the human approval (approved_at): a target confirmed by the
    server-initiated mode alone offers nothing to judge the window against, so this check is then not exercised
    and the run cannot certify EMC-GATE-005."""
    if world.profile.given and "host-reference" not in world.profile.confirmation_modes:
        pytest.skip("the profile declares only the server-initiated confirmation mode: the 30 s execution window runs "
                    "from the human approval, which only a host reference carries (approved_at); declaring the "
                    "host-reference mode unlocks this check")
    references(world)
    ttl = world.profile.reference_ttl_seconds
    if ttl < STALE_LIFETIME:
        pytest.skip(f"the profile's reference_ttl_seconds ({ttl}) is shorter than the {STALE_LIFETIME:g} s a reference "
                    "approved before the window needs to be unexpired: the window is not separately observable")
    arguments = target_for(world, tool)
    stale = approved(world, tool, arguments, approved_ago=STALE_APPROVAL, lifetime=STALE_LIFETIME)
    reply = send(world, tool, arguments, stale, valid=False)
    asked, refused = reply
    world.evidence.add("stale_approval", {"age": STALE_APPROVAL, "asked": asked, "outcome": outcome(refused)})
    world.expect(refused, f"a {tool.removeprefix('engram_memory_')} approved {STALE_APPROVAL:g} s ago (the "
                          f"execution window is {EXECUTE_WITHIN:g} s)")
    pin("EMC-HP-061", not asked, "the server asked the client for a confirmation although the call carried a "
                                 "reference")
    if tool == FORGET:
        world.expect(get_record(world, arguments["record_id"]), "get of the record after a refused forget")
    # The same call, approved FRESH_APPROVAL s ago: inside the window on any clock within the skew.
    confirm_runs(world, tool, arguments, "fresh_approval", approved_ago=FRESH_APPROVAL, lifetime=FRESH_LIFETIME)


# -- no reference ------------------------------------------------------------------------------------


@check("confirmation-ref.missing", "EMC-GATE-008", "EMC-HP-067",
       uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT, GET)})
@pytest.mark.engram_sessions("without-elicitation")
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET])
def test_a_gated_call_without_a_reference_gets_the_protocol_error(world: World, harness: Run, tool: str) -> None:
    """With no reference and no way to confirm otherwise, the call is -32603, asks nothing and changes nothing."""
    references(world)
    arguments = target_for(world, tool)
    sessions = [("no-elicitation session", session_without_elicitation(harness, world.era))]
    if "server-initiated" not in world.profile.confirmation_modes:
        sessions.append(("main session", world.conn))  # the only mode is the reference: no session may run unconfirmed
    for label, conn in sessions:
        asked, reply = send(world, tool, arguments, {}, conn=conn)
        world.evidence.add(label, {"asked": asked, "kind": reply.kind, "error": reply.error})
        assert not asked, f"{label}: the server asked for a confirmation the client cannot carry"
        what = f"{label}: a {tool.removeprefix('engram_memory_')} with no way to confirm it"
        world.expect(reply, what)
        refused_with(reply, "trusted_context_unavailable", what)
    if tool == FORGET:
        world.expect(get_record(world, arguments["record_id"]), "get of the record after an unconfirmed forget")
    confirm_runs(world, tool, arguments, "retry_with_good_reference")

