"""Lifecycle: what each admission outcome leaves behind, withdraw and forget, isolation, retention and consent."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from engram_mcp.conformance._checks import check, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._profile import ScopeProfile
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, planted_credential, unique
from engram_mcp.contract import record_id

SEARCH, GET, CAPTURE = "engram_memory_search", "engram_memory_get", "engram_memory_capture"
ADMIT, WITHDRAW, FORGET = "engram_memory_request_admission", "engram_memory_withdraw", "engram_memory_forget"
REASON = "reason:conformance"
# Scope roles, named with what the profile must state for a check that needs one.
REJECTING = "secret-rejecting (admission_policy reject or secret-scan, ungated, one principal granted every tool)"
ADJUDICATING = "adjudicating (admission_policy adjudicate, ungated, a principal granted capture and request_admission)"


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
    return world.call(
        GET, {"record_id": rid, "purpose_ref": world.profile.purpose_ref}, scope=scope, principal=principal
    )


def search_ids(world: World, query: str, scope: ScopeProfile | None = None, principal: str | None = None) -> list[str]:
    reply = world.call(
        SEARCH, {"query": query, "purpose_ref": world.profile.purpose_ref}, scope=scope, principal=principal
    )
    value = world.value(reply, "search")
    return [entry.get("record", {}).get("record_id") for entry in value.get("records", [])]


def accepted(world: World, text: str | None = None, **extra: Any) -> tuple[str, str, dict[str, Any]]:
    """A candidate admitted in the primary scope: (candidate_id, record_id, capture arguments)."""
    arguments, captured = world.capture(text=text, **extra)
    outcome = world.admit(captured["candidate_id"])
    require(outcome.get("status") == "accepted" and "record_id" in outcome,
            f"admission of benign content in the primary scope was {outcome.get('status')!r}, not accepted")
    return captured["candidate_id"], outcome["record_id"], arguments


def forgotten(world: World, text: str | None = None) -> tuple[str, str, dict[str, Any]]:
    """An accepted candidate whose record was then forgotten."""
    candidate, rid, arguments = accepted(world, text)
    world.value(world.call(FORGET, forgetting(rid)), "forget")
    return candidate, rid, arguments


def instant(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def refused(reply: Reply) -> str:
    return f"{reply.kind} {reply.code!r}"


# -- visibility of what is not current --------------------------------------------


@check("lifecycle.not-current-invisible", "EMC-LIFE-001")
@pytest.mark.parametrize("state", ["pending", "withdrawn", "rejected"])
def test_a_candidate_that_is_not_current_is_neither_searchable_nor_gettable(world: World, state: str) -> None:
    """A pending, withdrawn or rejected candidate is found by no search and returned by no get."""
    marker = unique("life")
    scope = world.primary
    if state == "rejected":
        scope = world.need(world.profile.rejecting_secrets(), REJECTING)
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
            outcome.get("status") == "rejected", f"the planted credential was {outcome.get('status')!r}, not rejected"
        )
    found = search_ids(world, marker, scope=scope, principal=principal)
    world.evidence.add("search_records", len(found))
    assert found == [], f"a search found {len(found)} record(s) for a {state} candidate's content"
    rid = would_be_record(captured)
    if rid is None:
        world.evidence.add("get", "not tried: the capture returned no record_digest")
        return
    reply = get(world, rid, scope=scope, principal=principal)
    world.evidence.add("get", seen(reply))
    assert reply.value is None, f"get returned the record of a {state} candidate"


# -- admission outcomes ----------------------------------------------------------


@check("lifecycle.accepted-outcome", "EMC-ADM-001", "EMC-ADM-003", "EMC-LIFE-002")
def test_an_accepted_candidate_becomes_a_current_record(world: World) -> None:
    """accepted names the record and echoes the candidate; get returns the record and search finds it."""
    marker = unique("life")
    _, captured = world.capture(text=text_with(marker))
    candidate = captured["candidate_id"]
    outcome = world.admit(candidate)
    world.evidence.add("status", outcome.get("status"))
    require(outcome.get("status") == "accepted", f"benign content was {outcome.get('status')!r}, not accepted")
    assert "record_id" in outcome, "an accepted outcome carries no record_id"
    assert outcome.get("candidate_id") == candidate, "outcome.candidate_id is not the candidate the call named"
    rid = outcome["record_id"]
    world.evidence.add("record_id_as_captured", rid == would_be_record(captured))
    reply = get(world, rid)
    world.evidence.add("get", seen(reply))
    value = reply.value
    assert value is not None, f"get of the accepted record was refused: {refused(reply)}"
    assert value.get("record", {}).get("record_id") == rid
    found = search_ids(world, marker)
    world.evidence.add("search_records", len(found))
    assert rid in found, "a search for the record's own text does not find it"


@check("lifecycle.domain-outcome-success", "EMC-ADM-002", "EMC-ADM-003")
@pytest.mark.parametrize("status", ["rejected", "pending_adjudication"])
def test_rejection_and_adjudication_are_success_envelopes(world: World, status: str) -> None:
    """rejected and pending_adjudication arrive in a success envelope that echoes the candidate."""
    if status == "rejected":
        scope = world.need(world.profile.rejecting_secrets(), REJECTING)
        text = f"{text_with(unique('life'))} Note: {planted_credential()}"
    else:
        scope = world.need(world.profile.adjudicating(), ADJUDICATING)
        text = None
    principal = world.principal(scope, {CAPTURE, ADMIT})
    _, captured = world.capture(scope=scope, principal=principal, text=text)
    reply = world.call(ADMIT, admission(captured["candidate_id"]), scope=scope, principal=principal)
    world.evidence.add("reply", seen(reply))
    world.evidence.add("isError", (reply.result or {}).get("isError"))
    envelope = reply.envelope if isinstance(reply.envelope, dict) else {}
    assert reply.kind == "result" and envelope.get("ok") is True, (
        f"an admission the policy decides as {status} came back as {refused(reply)}, not a success envelope")
    assert (reply.result or {}).get("isError") is not True
    outcome = (reply.value or {}).get("outcome", {})
    require(outcome.get("status") == status, f"the policy answered {outcome.get('status')!r}, not {status}")
    assert outcome.get("candidate_id") == captured["candidate_id"], (
        "outcome.candidate_id is not the candidate the call named"
    )


@check("lifecycle.no-decision-argument", "EMC-ADM-006")
@pytest.mark.parametrize("member", ["decision", "status"])
def test_the_caller_cannot_supply_the_decision(world: World, member: str) -> None:
    """request_admission with a decision of the caller's own is INVALID_SCHEMA, and the candidate stays pending."""
    _, captured = world.capture()
    claimed = {"decision": "accept", "status": "accepted"}[member]
    reply = world.call(ADMIT, {**admission(captured["candidate_id"]), member: claimed})
    world.evidence.add("admission", seen(reply))
    assert reply.code == "INVALID_SCHEMA", f"request_admission carrying {member} answered {seen(reply)}"
    after = world.call(ADMIT, admission(captured["candidate_id"]))
    world.evidence.add("admission_afterwards", seen(after))
    assert after.value is not None, f"the candidate is no longer pending after the refused call: {seen(after)}"


@check("lifecycle.adjudication-keeps-pending", "EMC-LIFE-009")
def test_a_candidate_awaiting_adjudication_stays_pending(world: World) -> None:
    """After pending_adjudication, admission may be asked again and withdraw still succeeds."""
    scope = world.need(world.profile.adjudicating(), ADJUDICATING)
    principal = world.principal(scope, {CAPTURE, ADMIT, WITHDRAW})
    _, captured = world.capture(scope=scope, principal=principal)
    candidate = captured["candidate_id"]
    outcome = world.admit(candidate, scope=scope, principal=principal)
    require(outcome.get("status") == "pending_adjudication", f"the policy answered {outcome.get('status')!r}")
    again = world.call(ADMIT, admission(candidate), scope=scope, principal=principal)
    world.evidence.add("second_admission", seen(again))
    assert again.value is not None, f"asking again under a new key was refused: {refused(again)}"
    reply = world.call(WITHDRAW, withdrawal(candidate), scope=scope, principal=principal)
    world.evidence.add("withdraw", seen(reply))
    value = reply.value
    assert value is not None, f"withdrawing a candidate awaiting adjudication was refused: {refused(reply)}"
    assert value.get("receipt", {}).get("from_state") == "pending"


@check("lifecycle.candidate-id-is-not-record-id", "EMC-LIFE-003")
@pytest.mark.parametrize("tool", [GET, FORGET])
def test_a_candidate_id_is_no_record_id(world: World, tool: str) -> None:
    """A candidate_id given to get or forget in place of a record_id is INVALID_SCHEMA."""
    candidate, _, _ = accepted(world)
    arguments = ({"record_id": candidate, "purpose_ref": world.profile.purpose_ref} if tool == GET
                 else forgetting(candidate))
    reply = world.call(tool, arguments)
    world.evidence.add("reply", seen(reply))
    assert reply.code == "INVALID_SCHEMA", f"{tool} given a candidate_id answered {seen(reply)}"


# -- withdraw ----------------------------------------------------------------------


@check("lifecycle.withdraw-pending", "EMC-WDR-001", "EMC-LIFE-005")
def test_withdrawing_a_pending_candidate_ends_it(world: World) -> None:
    """Withdraw moves a pending candidate to withdrawn; admission of it is then NOT_FOUND."""
    _, captured = world.capture()
    reply = world.call(WITHDRAW, withdrawal(captured["candidate_id"]))
    world.evidence.add("withdraw", seen(reply))
    value = reply.value
    assert value is not None, f"a confirmed withdraw of a pending candidate was refused: {refused(reply)}"
    receipt = value.get("receipt", {})
    world.evidence.add("receipt", {k: receipt.get(k) for k in ("operation", "from_state", "to_state")})
    assert (receipt.get("operation"), receipt.get("from_state"), receipt.get("to_state")) == (
        "withdraw",
        "pending",
        "withdrawn",
    )
    after = world.call(ADMIT, admission(captured["candidate_id"]))
    world.evidence.add("admission_afterwards", seen(after))
    assert after.code == "NOT_FOUND", f"admission of a withdrawn candidate answered {seen(after)}"


@check("lifecycle.withdraw-accepted", "EMC-LIFE-006")
def test_an_accepted_candidate_cannot_be_withdrawn(world: World) -> None:
    """Withdrawing an accepted candidate is ILLEGAL_TRANSITION and leaves the record current."""
    candidate, rid, _ = accepted(world)
    reply = world.call(WITHDRAW, withdrawal(candidate))
    world.evidence.add("withdraw", seen(reply))
    assert reply.code == "ILLEGAL_TRANSITION", f"withdraw of an accepted candidate answered {seen(reply)}"
    assert get(world, rid).value is not None, "the record is gone after a refused withdraw"


@check("lifecycle.readmit-accepted", "EMC-LIFE-007")
def test_an_accepted_candidate_cannot_be_admitted_again(world: World) -> None:
    """request_admission under a new key on an accepted candidate is ALREADY_TERMINAL."""
    candidate, rid, _ = accepted(world)
    reply = world.call(ADMIT, admission(candidate))
    world.evidence.add("admission", seen(reply))
    assert reply.code == "ALREADY_TERMINAL", f"a second admission of an accepted candidate answered {seen(reply)}"
    assert get(world, rid).value is not None, "the record is gone after a refused admission"


# -- forget -------------------------------------------------------------------------


@check("lifecycle.forget", "EMC-FGT-001", "EMC-FGT-002")
def test_forget_tombstones_a_record_for_good(world: World) -> None:
    """Forget of a current record answers a tombstone receipt; from then on get and search never return it."""
    marker = unique("life")
    _, rid, _ = accepted(world, text_with(marker))
    require(get(world, rid).value is not None and rid in search_ids(world, marker),
            "the accepted record cannot be read back before forget")
    reply = world.call(FORGET, forgetting(rid))
    world.evidence.add("forget", seen(reply))
    value = reply.value
    assert value is not None, f"a confirmed forget of a current record was refused: {refused(reply)}"
    receipt = value.get("receipt", {})
    world.evidence.add("receipt", {k: receipt.get(k) for k in ("operation", "from_state", "to_state")})
    assert (receipt.get("operation"), receipt.get("from_state"), receipt.get("to_state")) == (
        "tombstone", "accepted_current", "tombstoned")
    for attempt in ("at_once", "again"):
        after = get(world, rid)
        found = search_ids(world, marker)
        world.evidence.add(f"after_{attempt}", {"get": seen(after), "search_records": len(found)})
        assert after.value is None, "get still returns a forgotten record"
        assert rid not in found, "search still finds a forgotten record"


@check("lifecycle.forget-expired", "EMC-FGT-001", "EMC-LIFE-001")
def test_an_expired_record_is_hidden_and_can_still_be_forgotten(world: World) -> None:
    """A record past its expires_at is no longer returned, and forget of it succeeds from state expired."""
    marker = unique("life")
    expires = datetime.now(UTC) + timedelta(milliseconds=800)
    retention = {"derivative_rule": "make-ineligible", "expires_at": instant(expires)}
    reply = world.call(
        CAPTURE, capture_arguments(world.profile.purpose_ref, text=text_with(marker), retention=retention)
    )
    captured = world.value(reply, "capture with a near expiry")
    outcome = world.admit(captured["candidate_id"])
    require(outcome.get("status") == "accepted" and "record_id" in outcome, f"admission was {outcome.get('status')!r}")
    rid = outcome["record_id"]
    # Wait for the expiry, then give the target's clock up to three more seconds to agree.
    time.sleep(max(0.0, (expires - datetime.now(UTC)).total_seconds()) + 0.05)
    deadline, after = time.monotonic() + 3.0, get(world, rid)
    while after.value is not None and time.monotonic() < deadline:
        time.sleep(0.05)
        after = get(world, rid)
    found = search_ids(world, marker)
    world.evidence.add("after_expiry", {"get": seen(after), "search_records": len(found)})
    assert after.value is None, "get still returns a record three seconds after its expires_at"
    assert rid not in found, "search still finds an expired record"
    forget = world.call(FORGET, forgetting(rid))
    world.evidence.add("forget", seen(forget))
    value = forget.value
    assert value is not None, f"forget of an expired record was refused: {refused(forget)}"
    receipt = value.get("receipt", {})
    world.evidence.add("receipt", {k: receipt.get(k) for k in ("operation", "from_state", "to_state")})
    assert (receipt.get("operation"), receipt.get("from_state"), receipt.get("to_state")) == (
        "tombstone", "expired", "tombstoned")


@check("lifecycle.forgotten-candidate", "EMC-LIFE-008")
def test_the_candidate_of_a_forgotten_record_is_not_found(world: World) -> None:
    """Once its record is forgotten, withdraw and request_admission on the candidate are NOT_FOUND."""
    candidate, _, _ = forgotten(world)
    codes = {
        "withdraw": world.call(WITHDRAW, withdrawal(candidate)).code,
        "request_admission": world.call(ADMIT, admission(candidate)).code,
    }
    world.evidence.add("codes", codes)
    wrong = {tool: code for tool, code in codes.items() if code != "NOT_FOUND"}
    assert not wrong, f"the candidate of a forgotten record answered {wrong}"


@check("lifecycle.recapture-forgotten", "EMC-CAP-016")
def test_forgotten_content_can_be_captured_again(world: World) -> None:
    """The same content, captured again under a new key after forget, is committed_pending."""
    _, _, arguments = forgotten(world)
    reply = world.call(CAPTURE, {**arguments, "idempotency_key": fresh_key()})
    world.evidence.add("capture", seen(reply))
    value = reply.value
    assert value is not None and value.get("status") == "committed_pending", (
        f"capturing forgotten content again answered {seen(reply)}")


@check("lifecycle.forgotten-content-adjudicated", "EMC-ADM-007")
def test_forgotten_content_is_never_silently_readmitted(world: World) -> None:
    """Admission of content equal to a tombstoned record is pending_adjudication, where it would otherwise be
    accepted."""
    _, _, arguments = forgotten(world)
    captured = world.value(world.call(CAPTURE, {**arguments, "idempotency_key": fresh_key()}), "capture again")
    reply = world.call(ADMIT, admission(captured["candidate_id"]))
    world.evidence.add("admission", seen(reply))
    outcome = (reply.value or {}).get("outcome", {})
    assert outcome.get("status") == "pending_adjudication", (
        f"admission of forgotten content answered {seen(reply)}, not pending_adjudication")


# -- isolation -----------------------------------------------------------------------


@check("lifecycle.tenant-isolation", "EMC-HOST-005")
@pytest.mark.parametrize("other", ["other-tenant", "sibling-workspace"])
def test_a_record_stays_in_its_scope(world: World, other: str) -> None:
    """A record admitted in the primary scope is not found by search, nor returned by get, in another scope."""
    scope = world.need(world.profile.other_tenant() if other == "other-tenant" else world.profile.sibling_workspace(),
                       f"{other} (tenant isolation needs a second scope with memory on and a principal)")
    principal = world.principal(scope, {SEARCH, GET})
    marker = unique("life")
    _, rid, _ = accepted(world, text_with(marker))
    require(
        rid in search_ids(world, marker),
        "the record is not found in its own scope, so its absence elsewhere proves nothing",
    )
    found = search_ids(world, marker, scope=scope, principal=principal)
    world.evidence.add("search_records", len(found))
    assert found == [], f"a search bound to {other} found {len(found)} record(s) admitted in the primary scope"
    reply = get(world, rid, scope=scope, principal=principal)
    world.evidence.add("get", seen(reply))
    assert reply.value is None, f"get bound to {other} returned a record admitted in the primary scope"


# -- retention and consent ------------------------------------------------------------


def _capture_outcome(world: World, scope: ScopeProfile | None = None, **payload: Any) -> Reply:
    scope = scope or world.primary
    principal = world.principal(scope, {CAPTURE})
    return world.call(
        CAPTURE, capture_arguments(world.profile.purpose_ref, **payload), scope=scope, principal=principal
    )


def refused_capture(world: World, scope: ScopeProfile, code: str, what: str, **offending: Any) -> None:
    """A capture carrying ``offending`` is refused with ``code``, and the refusal left nothing behind.

    Three things would show that it did: the same call sent again is no longer refused the
    same way (a replay, or a DIGEST_CONFLICT because the key was taken); the same key with
    the offending part left out is not a first capture (committed_pending); or a search finds
    the refused content.
    """
    principal = world.principal(scope, {CAPTURE})
    marker = unique("life")
    refused = capture_arguments(world.profile.purpose_ref, text=text_with(marker), **offending)
    first = world.call(CAPTURE, refused, scope=scope, principal=principal)
    world.evidence.add("scope", scope.label)
    world.evidence.add("capture", seen(first))
    assert first.code == code, f"{what} answered {seen(first)}, not {code}"
    again = world.call(CAPTURE, refused, scope=scope, principal=principal)
    world.evidence.add("same_call_again", seen(again))
    assert again.code == code, (
        f"{what}, sent again with the same key, answered {seen(again)}: the refused call left something behind")
    searcher = scope.principal_with({SEARCH})
    if searcher is not None:
        found = search_ids(world, marker, scope=scope, principal=searcher)
        world.evidence.add("search_records", len(found))
        assert found == [], f"a search finds {len(found)} record(s) holding the content of a refused capture"
    fixed = {**refused, "payload": {k: v for k, v in refused["payload"].items() if k not in offending}}
    retry = world.call(CAPTURE, fixed, scope=scope, principal=principal)
    world.evidence.add("same_key_fixed", seen(retry))
    assert (retry.value or {}).get("status") == "committed_pending", (
        f"after {what} was refused, the same key with the arguments fixed answered {seen(retry)}, "
        "not a first capture (committed_pending): the refused call reserved the key or stored its content")


@check("lifecycle.retention-default", "EMC-RET-002")
def test_a_capture_without_retention_is_make_ineligible(world: World) -> None:
    """A record captured without retention carries derivative_rule make-ineligible."""
    _, rid, _ = accepted(world)
    value = world.value(get(world, rid), "get of the accepted record")
    redacted = value.get("redacted_fields", [])
    if any(p in ("/retention", "/retention/derivative_rule") for p in redacted):
        pytest.skip("the target redacts the record's retention")
    rule = value.get("record", {}).get("retention", {}).get("derivative_rule")
    world.evidence.add("derivative_rule", rule)
    assert rule == "make-ineligible", f"a capture without retention was stored with derivative_rule {rule!r}"


def _scope_by_retain(world: World, allowed: bool) -> ScopeProfile | None:
    primary = world.primary
    if primary.allow_retain == allowed:
        return primary
    fits = [s for s in world.profile.scopes
            if s.memory and s.allow_retain == allowed and s.principal_with({CAPTURE}) is not None]
    return min(fits, key=lambda s: s.confirm_capture, default=None)  # an ungated scope when there is one


@check("lifecycle.retain-permission", "EMC-RET-003", "EMC-CAP-013")
@pytest.mark.parametrize("permission", ["not-allowed", "allowed"])
def test_retain_needs_the_hosts_permission(world: World, permission: str) -> None:
    """derivative_rule retain is UNAUTHORIZED, storing nothing, where the host does not allow it; accepted where it
    does."""
    allowed = permission == "allowed"
    scope = world.need(_scope_by_retain(world, allowed),
                       f"retain-{permission} (allow_retain = {str(allowed).lower()}, a principal granted capture)")
    if not allowed:
        refused_capture(world, scope, "UNAUTHORIZED", "retain without the host's permission",
                        retention={"derivative_rule": "retain"})
        return
    reply = _capture_outcome(world, scope, retention={"derivative_rule": "retain"})
    world.evidence.add("scope", scope.label)
    world.evidence.add("capture", seen(reply))
    value = reply.value
    assert value is not None and value.get("status") == "committed_pending", (
        f"retain where the host allows it answered {seen(reply)}")


@check("lifecycle.retention-ceiling", "EMC-RET-004", "EMC-CAP-013")
def test_an_expiry_beyond_the_ceiling_is_unauthorized(world: World) -> None:
    """expires_at later than the host's retention ceiling is UNAUTHORIZED and stores nothing; one within it is
    accepted."""
    ceiling = world.primary.retention_ceiling_seconds
    if ceiling <= 0:
        pytest.skip("the profile states no retention ceiling for the primary scope (profile key "
                    "retention_ceiling_seconds): stating it unlocks this check")
    now = datetime.now(UTC)
    beyond = instant(now + timedelta(seconds=ceiling) + timedelta(days=2))  # a margin for the clocks
    within = instant(now + timedelta(seconds=min(ceiling // 2, 86_400)))
    refused_capture(world, world.primary, "UNAUTHORIZED", "expires_at beyond the ceiling",
                    retention={"derivative_rule": "make-ineligible", "expires_at": beyond})
    near = _capture_outcome(world, retention={"derivative_rule": "make-ineligible", "expires_at": within})
    world.evidence.add("within_ceiling", seen(near))
    assert (near.value or {}).get("status") == "committed_pending", (
        f"expires_at within the ceiling answered {seen(near)}"
    )


@check("lifecycle.retention-past", "EMC-RET-005")
def test_an_expiry_in_the_past_is_invalid(world: World) -> None:
    """expires_at before the capture time is INVALID_SCHEMA, and the refused capture leaves nothing behind."""
    past = instant(datetime.now(UTC) - timedelta(hours=1))
    refused_capture(world, world.primary, "INVALID_SCHEMA", "expires_at in the past",
                    retention={"derivative_rule": "make-ineligible", "expires_at": past})


@check("lifecycle.reconciliation-consent", "EMC-CAP-012", "EMC-CAP-013")
@pytest.mark.parametrize("family", ["unconsented", "consented"])
def test_a_reconciliation_family_needs_the_hosts_consent(world: World, family: str) -> None:
    """A family the host has not consented to is UNAUTHORIZED and stores nothing; a consented one is
    committed_pending."""
    consented = sorted(world.primary.consented_families)
    if family == "unconsented":
        name = "family:conformance-" + unique("f")
        require(name not in consented, "the made-up family is consented")
        refused_capture(world, world.primary, "UNAUTHORIZED", "a family the host never consented to",
                        reconciliation={"family_refs": [name]})
        return
    if not consented:
        pytest.skip("the profile consents the primary scope to no reconciliation family (profile key "
                    "consented_families): naming one unlocks this case")
    reply = _capture_outcome(world, reconciliation={"family_refs": [consented[0]]})
    world.evidence.add("capture", seen(reply))
    assert (reply.value or {}).get("status") == "committed_pending", f"a consented family answered {seen(reply)}"
