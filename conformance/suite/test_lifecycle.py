"""Lifecycle: what each admission outcome leaves behind, withdraw and forget, isolation, retention and consent."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest

from engram_mcp.conformance._background import in_background
from engram_mcp.conformance._checks import check, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, GET, SEARCH, WITHDRAW
from engram_mcp.conformance._profile import ACCEPTS_BENIGN, ScopeProfile
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._tracker import Intent
from engram_mcp.conformance._words import spoken
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, planted_credential, unique
from engram_mcp.contract import load, record_id

REASON = "reason:conformance"
SKEW = load().limit("binding.clock_skew")
# Scope roles, named with what the profile must state for a check that needs one.


# -- helpers -------------------------------------------------------------------


def seen(reply: Reply) -> dict[str, Any]:
    """What a reply was, for the evidence: its kind, its code, and a status when it has one."""
    summary: dict[str, Any] = {"kind": reply.kind, "code": reply.code}
    value = reply.value
    if value is not None:
        status = value.get("status") or value.get("outcome", {}).get("status")
        if status:
            summary["status"] = status
    return summary



def text_with(marker: str) -> str:
    return f"Decision {marker}: rotate the on-call roster every Monday."



def would_be_record(captured: dict[str, Any]) -> str | None:
    """The record id a candidate would get on admission, derived from the capture's record_digest."""
    digest = captured.get("record_digest")
    try:
        return record_id(digest) if isinstance(digest, str) and digest.startswith("sha256:") else None
    except ValueError:
        return None


def admission(candidate_id: str, key: str | None = None) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": key or fresh_key()}


def withdrawal(candidate_id: str) -> dict[str, Any]:
    return {"candidate_id": candidate_id, "idempotency_key": fresh_key(), "reason_ref": REASON}


def forgetting(rid: str) -> dict[str, Any]:
    return {"record_id": rid, "idempotency_key": fresh_key(), "reason_ref": REASON}


def get(world: World, rid: str, scope: ScopeProfile | None = None, principal: str | None = None) -> Reply:
    return world.get(rid, scope=scope, principal=principal)


def search_ids(world: World, query: str, scope: ScopeProfile | None = None, principal: str | None = None) -> list[str]:
    """The records a search for a marker of the check's own returns, judged by the contract model."""
    return world.found(world.search(query, scope=scope, principal=principal, owned=True, limit=50),
                       f"a search for the marker {query}")


def accepted(world: World, text: str | None = None, **extra: Any) -> tuple[str, str, dict[str, Any]]:
    """A candidate admitted in the check's scope: (candidate_id, record_id, capture arguments)."""
    arguments, captured = world.capture(text=text, **extra)
    outcome = world.admit(captured["candidate_id"])
    require(outcome.get("status") == "accepted" and "record_id" in outcome,
            f"admission of benign content in the check's scope was {spoken(outcome.get('status'))}, not accepted")
    return captured["candidate_id"], outcome["record_id"], arguments


def forgotten(world: World, text: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """An accepted candidate whose record was then forgotten."""
    candidate, rid, arguments = accepted(world, text)
    world.value(world.call(FORGET, forgetting(rid)), "forget")
    return candidate, rid, arguments


def instant(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def refused(reply: Reply) -> str:
    return reply.said()


# -- visibility of what is not current --------------------------------------------


@check("lifecycle.not-current-invisible", "EMC-LIFE-001",
       uses=(CAPTURE, SEARCH, GET), cases={"withdrawn": (WITHDRAW,), "rejected": (ADMIT,)})
@pytest.mark.parametrize("state", ["pending", "withdrawn", "rejected"])
def test_a_candidate_that_is_not_current_is_neither_searchable_nor_gettable(world: World, state: str) -> None:
    """A pending, withdrawn or rejected candidate is found by no search and returned by no get."""
    marker = unique("life")
    scope = world.scope
    if state == "rejected":
        scope = world.role("secret-rejecting")
        text = f"{text_with(marker)} Note: {planted_credential()}"
    else:
        text = text_with(marker)
    principal = world.principal(scope, {CAPTURE, ADMIT, WITHDRAW, SEARCH, GET})
    _, captured = world.capture(scope=scope, principal=principal, text=text)
    if state == "withdrawn":
        world.value(
            world.call(WITHDRAW, withdrawal(captured["candidate_id"]), scope=scope, principal=principal), "withdraw"
        )
    elif state == "rejected":
        outcome = world.admit(captured["candidate_id"], scope=scope, principal=principal)
        require(
            outcome.get("status") == "rejected",
            f"the planted credential was {spoken(outcome.get('status'))}, not rejected"
        )
    found = search_ids(world, marker, scope=scope, principal=principal)
    world.evidence.add("search_records", len(found))
    rid = would_be_record(captured)
    if rid is None:
        world.evidence.add("get", "not tried: the capture returned no record_digest")
        return
    reply = get(world, rid, scope=scope, principal=principal)
    world.evidence.add("get", seen(reply))
    world.expect(reply, f"get of the record a {state} candidate would become")


# -- admission outcomes ----------------------------------------------------------


@check("lifecycle.accepted-outcome", "EMC-ADM-001", "EMC-ADM-003", "EMC-LIFE-002", uses=(CAPTURE, ADMIT, GET, SEARCH))
def test_an_accepted_candidate_becomes_a_current_record(world: World) -> None:
    """accepted names the record and echoes the candidate; get returns the record and search finds it."""
    marker = unique("life")
    _, captured = world.capture(text=text_with(marker))
    candidate = captured["candidate_id"]
    reply = world.call(ADMIT, admission(candidate))
    outcome = world.expect(reply, "admission of benign content")
    world.evidence.add("status", (reply.value or {}).get("outcome", {}).get("status"))
    require(outcome.matched == ("accepted",), f"benign content was {reply.said()}, not accepted")
    rid = reply.value["outcome"]["record_id"]
    world.evidence.add("record_id_as_captured", rid == would_be_record(captured))
    read = get(world, rid)
    world.evidence.add("get", seen(read))
    world.expect(read, "get of the accepted record")
    found = search_ids(world, marker)
    world.evidence.add("search_records", len(found))


@check("lifecycle.domain-outcome-success", "EMC-ADM-002", "EMC-ADM-003", uses=(CAPTURE, ADMIT))
@pytest.mark.parametrize("status", ["rejected", "pending_adjudication"])
def test_rejection_and_adjudication_are_success_envelopes(
        world: World, status: Literal["rejected", "pending_adjudication"]) -> None:
    """rejected and pending_adjudication arrive in a success envelope that echoes the candidate."""
    if status == "rejected":
        scope = world.role("secret-rejecting")
        text = f"{text_with(unique('life'))} Note: {planted_credential()}"
    else:
        scope = world.role("adjudicating")
        text = None
    principal = world.principal(scope, {CAPTURE, ADMIT})
    _, captured = world.capture(scope=scope, principal=principal, text=text)
    reply = world.call(ADMIT, admission(captured["candidate_id"]), scope=scope, principal=principal,
                       intent=Intent(decisions=frozenset({status})))
    world.evidence.add("reply", seen(reply))
    world.evidence.add("isError", (reply.result or {}).get("isError"))
    envelope = reply.envelope if isinstance(reply.envelope, dict) else {}
    require(not (reply.kind == "result" and envelope.get("ok") is True
                 and (reply.value or {}).get("outcome", {}).get("status") not in (status, None)),
            f"the policy answered {reply.said()}, not {status}")
    world.expect(reply, f"an admission the policy decides as {status}")
    assert (reply.result or {}).get("isError") is not True, f"a {status} outcome came with isError true"


@check("lifecycle.no-decision-argument", "EMC-ADM-006", uses=(CAPTURE, ADMIT))
@pytest.mark.parametrize("member", ["decision", "status"])
def test_the_caller_cannot_supply_the_decision(world: World, member: str) -> None:
    """request_admission with a decision of the caller's own is INVALID_SCHEMA, and the candidate stays pending."""
    _, captured = world.capture()
    claimed = {"decision": "accept", "status": "accepted"}[member]
    reply = world.call(ADMIT, {**admission(captured["candidate_id"]), member: claimed})
    world.evidence.add("admission", seen(reply))
    world.expect(reply, f"request_admission carrying {member}")
    after = world.call(ADMIT, admission(captured["candidate_id"]))
    world.evidence.add("admission_afterwards", seen(after))
    world.expect(after, "admission of the candidate after the refused call")


@check("lifecycle.adjudication-keeps-pending", "EMC-LIFE-009", uses=(CAPTURE, ADMIT, WITHDRAW), roles="adjudicating")
def test_a_candidate_awaiting_adjudication_stays_pending(world: World) -> None:
    """After pending_adjudication, admission may be asked again and withdraw still succeeds."""
    scope = world.role("adjudicating")
    principal = world.principal(scope, {CAPTURE, ADMIT, WITHDRAW})
    _, captured = world.capture(scope=scope, principal=principal)
    candidate = captured["candidate_id"]
    outcome = world.admit(candidate, scope=scope, principal=principal)
    require(outcome.get("status") == "pending_adjudication", f"the policy answered {spoken(outcome.get('status'))}")
    again = world.call(ADMIT, admission(candidate), scope=scope, principal=principal)
    world.evidence.add("second_admission", seen(again))
    world.expect(again, "asking again for the admission of a candidate awaiting adjudication")
    reply = world.call(WITHDRAW, withdrawal(candidate), scope=scope, principal=principal)
    world.evidence.add("withdraw", seen(reply))
    world.expect(reply, "withdraw of a candidate awaiting adjudication")


@check("lifecycle.candidate-id-is-not-record-id", "EMC-LIFE-003", uses=(CAPTURE, ADMIT, CASE_TOOL))
@pytest.mark.parametrize("tool", [GET, FORGET])
def test_a_candidate_id_is_no_record_id(world: World, tool: str) -> None:
    """A candidate_id given to get or forget in place of a record_id is refused: INVALID_SCHEMA where it breaks the
    record_id pattern, and a record it names nothing of otherwise."""
    candidate, _, _ = accepted(world)
    arguments = ({"record_id": candidate, "purpose_ref": world.profile.purpose_ref} if tool == GET
                 else forgetting(candidate))
    reply = world.call(tool, arguments)
    world.evidence.add("reply", seen(reply))
    world.expect(reply, f"{tool} given a candidate_id")


# -- withdraw ----------------------------------------------------------------------


@check("lifecycle.withdraw-pending", "EMC-WDR-001", "EMC-LIFE-011", uses=(CAPTURE, WITHDRAW, ADMIT))
def test_withdrawing_a_pending_candidate_ends_it(world: World) -> None:
    """Withdraw moves a pending candidate to withdrawn; admission of it is then refused without effect."""
    _, captured = world.capture()
    reply = world.call(WITHDRAW, withdrawal(captured["candidate_id"]))
    world.evidence.add("withdraw", seen(reply))
    world.expect(reply, "a confirmed withdraw of a pending candidate")
    receipt = (reply.value or {}).get("receipt", {})
    world.evidence.add("receipt", {k: receipt.get(k) for k in ("operation", "from_state", "to_state")})
    after = world.call(ADMIT, admission(captured["candidate_id"]))
    world.evidence.add("admission_afterwards", seen(after))
    world.expect(after, "admission of a withdrawn candidate")


@check("lifecycle.withdraw-accepted", "EMC-LIFE-011", "EMC-LIFE-006", uses=(CAPTURE, ADMIT, WITHDRAW, GET))
def test_an_accepted_candidate_cannot_be_withdrawn(world: World) -> None:
    """Withdrawing an accepted candidate is refused without effect (ILLEGAL_TRANSITION in this profile), and the
    record stays current."""
    candidate, rid, _ = accepted(world)
    reply = world.call(WITHDRAW, withdrawal(candidate))
    world.evidence.add("withdraw", seen(reply))
    world.expect(reply, "withdraw of an accepted candidate")
    world.expect(get(world, rid), "get of the record after the refused withdraw")


@check("lifecycle.readmit-accepted", "EMC-LIFE-011", "EMC-LIFE-007", uses=(CAPTURE, ADMIT, GET))
def test_an_accepted_candidate_cannot_be_admitted_again(world: World) -> None:
    """request_admission under a new key on an accepted candidate is refused without effect (ALREADY_TERMINAL in
    this profile)."""
    candidate, rid, _ = accepted(world)
    reply = world.call(ADMIT, admission(candidate))
    world.evidence.add("admission", seen(reply))
    world.expect(reply, "a second admission of an accepted candidate")
    world.expect(get(world, rid), "get of the record after the refused admission")


# -- forget -------------------------------------------------------------------------


@check("lifecycle.forget", "EMC-FGT-001", "EMC-FGT-002", uses=(CAPTURE, ADMIT, GET, SEARCH, FORGET))
def test_forget_tombstones_a_record_for_good(world: World) -> None:
    """Forget of a current record answers a tombstone receipt; from then on get and search never return it."""
    marker = unique("life")
    _, rid, _ = accepted(world, text_with(marker))
    require(get(world, rid).value is not None and rid in search_ids(world, marker),
            "the accepted record cannot be read back before forget")
    reply = world.call(FORGET, forgetting(rid))
    world.evidence.add("forget", seen(reply))
    world.expect(reply, "a confirmed forget of a current record")
    receipt = (reply.value or {}).get("receipt", {})
    world.evidence.add("receipt", {k: receipt.get(k) for k in ("operation", "from_state", "to_state")})
    for attempt in ("at_once", "again"):
        after = get(world, rid)
        world.expect(after, "get of a forgotten record")
        found = search_ids(world, marker)
        world.evidence.add(f"after_{attempt}", {"get": seen(after), "search_records": len(found)})


FORGET_EXPIRED = "lifecycle.forget-expired"


@check(FORGET_EXPIRED, "EMC-FGT-001", "EMC-LIFE-001", uses=(CAPTURE, ADMIT, GET, SEARCH, FORGET))
def test_an_expired_record_is_hidden_and_can_still_be_forgotten(harness: Run, world: World) -> None:
    """A record past its expires_at is no longer returned, and forget of it succeeds from state expired.
    Mostly a wait past the expiry and the clock skew: it runs on a session of its own beside the other waiting
    checks (_background)."""
    harness.background.take(FORGET_EXPIRED, world)


@in_background(FORGET_EXPIRED)
def expired_record_hidden_then_forgotten(world: World) -> None:
    marker = unique("life")
    expires = datetime.now(UTC) + timedelta(milliseconds=800)
    retention = {"derivative_rule": "make-ineligible", "expires_at": instant(expires)}
    reply = world.call(
        CAPTURE, capture_arguments(world.profile.purpose_ref, text=text_with(marker), retention=retention)
    )
    captured = world.value(reply, "capture with a near expiry")
    outcome = world.admit(captured["candidate_id"])
    require(outcome.get("status") == "accepted" and "record_id" in outcome,
            f"admission was {spoken(outcome.get('status'))}")
    rid = outcome["record_id"]
    # Past the expiry by more than the clock skew a server's clock may differ by: then it must be hidden.
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + SKEW + 0.2)
    after = get(world, rid)
    world.expect(after, "get of a record past its expires_at")
    found = search_ids(world, marker)
    world.evidence.add("after_expiry", {"get": seen(after), "search_records": len(found)})
    forget = world.call(FORGET, forgetting(rid))
    world.evidence.add("forget", seen(forget))
    world.expect(forget, "forget of an expired record")
    receipt = (forget.value or {}).get("receipt", {})
    world.evidence.add("receipt", {k: receipt.get(k) for k in ("operation", "from_state", "to_state")})


@check("lifecycle.forgotten-candidate", "EMC-LIFE-011", "EMC-LIFE-008", uses=(CAPTURE, ADMIT, FORGET, WITHDRAW))
def test_the_candidate_of_a_forgotten_record_is_not_found(world: World) -> None:
    """Once its record is forgotten, withdraw and request_admission on the candidate are refused without effect
    (NOT_FOUND in this profile)."""
    candidate, _, _ = forgotten(world)
    replies = {"withdraw": world.call(WITHDRAW, withdrawal(candidate)),
               "request_admission": world.call(ADMIT, admission(candidate))}
    world.evidence.add("codes", {tool: reply.code for tool, reply in replies.items()})
    for tool, reply in replies.items():
        world.expect(reply, f"{tool} of the candidate of a forgotten record")


@check("lifecycle.recapture-forgotten", "EMC-CAP-016", uses=(CAPTURE, ADMIT, FORGET))
def test_forgotten_content_can_be_captured_again(world: World) -> None:
    """The same content, captured again under a new key after forget, is committed_pending."""
    _, _, arguments = forgotten(world)
    reply = world.call(CAPTURE, {**arguments, "idempotency_key": fresh_key()})
    world.evidence.add("capture", seen(reply))
    world.expect(reply, "capturing forgotten content again under a new key")


ELSEWHERE = ("a second scope with memory on, admitting benign content, where a principal is granted capture and "
             "request_admission")


@check("lifecycle.forgotten-content-adjudicated", "EMC-ADM-007", uses=(CAPTURE, ADMIT, FORGET))
@pytest.mark.parametrize("where", ["same-scope", "other-scope"])
def test_forgotten_content_is_never_silently_readmitted(world: World, where: str) -> None:
    """Admission of content equal to a record tombstoned in the same scope is pending_adjudication where it would
    otherwise be accepted; a tombstone in another scope decides nothing there."""
    _, _, arguments = forgotten(world)
    scope = world.scope
    if where == "other-scope":
        scope = world.need(world.profile.find(lambda s: s != world.scope and s.memory and not s.confirm_capture
                                              and not s.confirm_admission and s.admission_policy in ACCEPTS_BENIGN
                                              and s.principal_with({CAPTURE, ADMIT}) is not None), ELSEWHERE)
    principal = world.principal(scope, {CAPTURE, ADMIT})
    captured = world.value(world.call(CAPTURE, {**arguments, "idempotency_key": fresh_key()}, scope=scope,
                                      principal=principal), "capture again")
    reply = world.call(ADMIT, admission(captured["candidate_id"]), scope=scope, principal=principal)
    world.evidence.add("admission", {"scope": scope.label, **seen(reply)})
    world.expect(reply, f"admission of content forgotten in {'this' if where == 'same-scope' else 'another'} scope")


@check("lifecycle.forgotten-content-rejected", "EMC-ADM-008", uses=(CAPTURE, ADMIT, FORGET), roles="secret-rejecting")
def test_a_policy_rejection_of_forgotten_content_stays_rejected(world: World) -> None:
    """Content equal to a forgotten record, which the host's policy rejects (a credential in its evidence), is
    rejected, not pending_adjudication: the tombstone safeguard changes only an accepting decision."""
    scope = world.role("secret-rejecting")
    require(scope.admission_policy == "secret-scan", f"{scope.label} rejects everything: nothing it rejects was "
                                                     "admitted before, so no tombstone can match it")
    principal = world.principal(scope, {CAPTURE, ADMIT, FORGET})
    secret = {"attestation": f"Checked against the runbook. {planted_credential()}"}
    control = capture_arguments(world.profile.purpose_ref)
    control["evidence"] = {**control["evidence"], **secret}
    captured = world.value(world.call(CAPTURE, control, scope=scope, principal=principal), "the control capture")
    decided = world.admit(captured["candidate_id"], scope=scope, principal=principal)
    require(decided.get("status") == "rejected", f"{scope.label}'s policy answered "
            f"{spoken(decided.get('status'))} for a "
            "credential in the evidence, not rejected: it does not scan the evidence, so this cannot be shown")
    _, _, arguments = forgotten_in(world, scope, principal)
    again = {**arguments, "idempotency_key": fresh_key(), "evidence": {**arguments["evidence"], **secret}}
    reply_capture = world.call(CAPTURE, again, scope=scope, principal=principal)
    captured = world.value(reply_capture, "capture of the forgotten payload with the credential in its evidence")
    reply = world.call(ADMIT, admission(captured["candidate_id"]), scope=scope, principal=principal,
                       intent=Intent(decisions=frozenset({"rejected"})))
    world.evidence.add("admission", seen(reply))
    world.expect(reply, "admission of forgotten content that the host's policy rejects")


def forgotten_in(world: World, scope: ScopeProfile, principal: str) -> tuple[str, str, dict[str, Any]]:
    arguments, captured = world.capture(scope=scope, principal=principal)
    outcome = world.admit(captured["candidate_id"], scope=scope, principal=principal)
    require(outcome.get("status") == "accepted",
            f"benign content was {spoken(outcome.get('status'))} in {scope.label}")
    world.value(world.call(FORGET, forgetting(outcome["record_id"]), scope=scope, principal=principal), "forget")
    return captured["candidate_id"], outcome["record_id"], arguments


# -- isolation -----------------------------------------------------------------------


@check("lifecycle.tenant-isolation", "EMC-HOST-005", uses=(CAPTURE, ADMIT, SEARCH, GET))
@pytest.mark.parametrize("other", ["other-tenant", "sibling-workspace"])
def test_a_record_stays_in_its_scope(world: World, other: str) -> None:
    """A record admitted in the check's scope is not found by search, nor returned by get, in another scope."""
    scope = world.role("second-tenant" if other == "other-tenant" else "second-workspace")
    principal = world.principal(scope, {SEARCH, GET})
    marker = unique("life")
    _, rid, _ = accepted(world, text_with(marker))
    require(
        rid in search_ids(world, marker),
        "the record is not found in its own scope, so its absence elsewhere proves nothing",
    )
    found = search_ids(world, marker, scope=scope, principal=principal)
    world.evidence.add("search_records", len(found))
    reply = get(world, rid, scope=scope, principal=principal)
    world.evidence.add("get", seen(reply))
    world.expect(reply, f"get bound to {other} of a record admitted in the check's scope")


# -- retention and consent ------------------------------------------------------------


def _capture_outcome(world: World, scope: ScopeProfile | None = None, **payload: Any) -> Reply:
    scope = scope or world.scope
    principal = world.principal(scope, {CAPTURE})
    return world.call(
        CAPTURE, capture_arguments(world.profile.purpose_ref, **payload), scope=scope, principal=principal
    )


def refused_capture(world: World, scope: ScopeProfile, what: str, **offending: Any) -> None:
    """A capture carrying ``offending`` is refused as the contract model says, and the refusal left nothing behind.

    Three things would show that it did: the same call sent again is not refused the same way (a replay); the
    same key with the offending part left out is answered as a repetition (duplicate_exact: the refused content
    was stored); or a search finds the refused content. Whether the refusal may use the key up (so that the
    fixed call is DIGEST_CONFLICT) the contract leaves open; this profile says it may not (EMC-HP-071).
    """
    principal = world.principal(scope, {CAPTURE})
    marker = unique("life")
    refused = capture_arguments(world.profile.purpose_ref, text=text_with(marker), **offending)
    first = world.call(CAPTURE, refused, scope=scope, principal=principal)
    world.evidence.add("scope", scope.label)
    world.evidence.add("capture", seen(first))
    world.expect(first, what)  # a refusal the contract requires, not given, fails here
    require(first.value is None, f"{what} was taken ({first.said()}), so no refusal can be judged")
    again = world.call(CAPTURE, refused, scope=scope, principal=principal)
    world.evidence.add("same_call_again", seen(again))
    world.expect(again, f"{what}, sent again with the same key")
    searcher = scope.principal_with({SEARCH})
    if searcher is not None:
        found = search_ids(world, marker, scope=scope, principal=searcher)
        world.evidence.add("search_records", len(found))
    fixed = {**refused, "payload": {k: v for k, v in refused["payload"].items() if k not in offending}}
    retry = world.call(CAPTURE, fixed, scope=scope, principal=principal)
    world.evidence.add("same_key_fixed", seen(retry))
    world.expect(retry, f"after {what} was refused, the same key with the arguments fixed")


@check("lifecycle.retention-default", "EMC-RET-002", uses=(CAPTURE, ADMIT, GET))
def test_a_capture_without_retention_is_make_ineligible(world: World) -> None:
    """A record captured without retention carries derivative_rule make-ineligible."""
    _, rid, _ = accepted(world)
    reply = get(world, rid)
    world.expect(reply, "get of the accepted record")
    value = world.value(reply, "get of the accepted record")
    redacted = value.get("redacted_fields", [])
    if any(p in ("/retention", "/retention/derivative_rule") for p in redacted):
        pytest.skip("the target redacts the record's retention")
    rule = value.get("record", {}).get("retention", {}).get("derivative_rule")
    world.evidence.add("derivative_rule", rule)
    assert rule == "make-ineligible", f"a capture without retention was stored with derivative_rule {spoken(rule)}"


def _scope_by_retain(world: World, allowed: bool) -> ScopeProfile | None:
    primary = world.scope
    if primary.allow_retain == allowed:
        return primary
    fits = [s for s in world.profile.scopes
            if s.memory and s.allow_retain == allowed and s.principal_with({CAPTURE}) is not None]
    return min(fits, key=lambda s: s.confirm_capture, default=None)  # an ungated scope when there is one


@check("lifecycle.retain-permission", "EMC-RET-003", "EMC-CAP-013", "EMC-HP-071",
       uses=CAPTURE, cases={"not-allowed": (SEARCH,)})
@pytest.mark.parametrize("permission", ["not-allowed", "allowed"])
def test_retain_needs_the_hosts_permission(world: World, permission: str) -> None:
    """derivative_rule retain is UNAUTHORIZED, storing nothing, where the host does not allow it; accepted where it
    does."""
    allowed = permission == "allowed"
    scope = world.need(_scope_by_retain(world, allowed), f"a scope with memory on where allow_retain = "
                       f"{str(allowed).lower()} and a principal is granted capture")
    if not allowed:
        refused_capture(world, scope, "retain without the host's permission", retention={"derivative_rule": "retain"})
        return
    reply = _capture_outcome(world, scope, retention={"derivative_rule": "retain"})
    world.evidence.add("scope", scope.label)
    world.evidence.add("capture", seen(reply))
    world.expect(reply, "retain where the host allows it")


@check("lifecycle.retention-ceiling", "EMC-RET-004", "EMC-CAP-013", "EMC-HP-071", uses=(CAPTURE, SEARCH))
def test_an_expiry_beyond_the_ceiling_is_unauthorized(world: World) -> None:
    """expires_at later than the host's retention ceiling is UNAUTHORIZED and stores nothing; one within it is
    accepted."""
    ceiling = world.scope.retention_ceiling_seconds
    if ceiling <= 0:
        pytest.skip("the profile states no retention ceiling for the check's scope (profile key "
                    "retention_ceiling_seconds): stating it unlocks this check")
    now = datetime.now(UTC)
    beyond = instant(now + timedelta(seconds=ceiling) + timedelta(days=2))  # a margin for the clocks
    within = instant(now + timedelta(seconds=min(ceiling // 2, 86_400)))
    refused_capture(world, world.scope, "expires_at beyond the ceiling",
                    retention={"derivative_rule": "make-ineligible", "expires_at": beyond})
    near = _capture_outcome(world, retention={"derivative_rule": "make-ineligible", "expires_at": within})
    world.evidence.add("within_ceiling", seen(near))
    world.expect(near, "expires_at within the ceiling")


@check("lifecycle.retention-past", "EMC-RET-005", "EMC-HP-071", uses=(CAPTURE, SEARCH))
def test_an_expiry_in_the_past_is_invalid(world: World) -> None:
    """expires_at before the capture time is INVALID_SCHEMA, and the refused capture leaves nothing behind."""
    past = instant(datetime.now(UTC) - timedelta(hours=1))
    refused_capture(world, world.scope, "expires_at in the past",
                    retention={"derivative_rule": "make-ineligible", "expires_at": past})


@check("lifecycle.reconciliation-consent", "EMC-CAP-012", "EMC-CAP-013", "EMC-HP-071",
       uses=CAPTURE, cases={"unconsented": (SEARCH,)})
@pytest.mark.parametrize("family", ["unconsented", "consented"])
def test_a_reconciliation_family_needs_the_hosts_consent(world: World, family: str) -> None:
    """A family the host has not consented to is UNAUTHORIZED and stores nothing; a consented one is
    committed_pending."""
    consented = sorted(world.scope.consented_families)
    if family == "unconsented":
        name = "family:conformance-" + unique("f")
        require(name not in consented, "the made-up family is consented")
        refused_capture(world, world.scope, "a family the host never consented to",
                        reconciliation={"family_refs": [name]})
        return
    if not consented:
        pytest.skip("the profile consents the check's scope to no reconciliation family (profile key "
                    "consented_families): naming one unlocks this case")
    reply = _capture_outcome(world, reconciliation={"family_refs": [consented[0]]})
    world.evidence.add("capture", seen(reply))
    world.expect(reply, "a capture naming a family the host consented to")
