"""Host-owned context the binding carries besides the scope: the auditId, the deadline, cancellation,
the keys' trusted tenants and issuers, and capture authority (host wiring §1.3 and §1.7).

Deadlines in the past or future are set well beyond ``binding.clock_skew``, so a
correct server on a slightly different clock passes. The two waits a server
makes only in the legacy era (the confirmation it asks for) are exercised there;
in 2026-07-28 the server never waits for the host, so those checks are not
applicable, and say why.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from engram_mcp.conformance._background import in_background
from engram_mcp.conformance._checks import check, not_applicable, pin, require
from engram_mcp.conformance._connect import Reply
from engram_mcp.conformance._head_start import head_start
from engram_mcp.conformance._needs import ADMIT, CAPTURE, CASE_TOOL, FORGET, GET, SEARCH, WITHDRAW
from engram_mcp.conformance._profile import Profile, ScopeProfile
from engram_mcp.conformance._run import Run
from engram_mcp.conformance._words import answer_words
from engram_mcp.conformance._world import World, capture_arguments, fresh_key, refused_with, unknown_record
from engram_mcp.conformance.hosts import FORGERY_WORDS, Forgery
from engram_mcp.contract import load

CONTRACT = load()
UNTRUSTED = CONTRACT.protocol_errors["trusted_context_unavailable"]
UNKNOWN_TOOL = CONTRACT.protocol_errors["unknown_tool"]
SKEW = CONTRACT.limit("binding.clock_skew")
AUDIT_ID_MAX = CONTRACT.limit("audit_id.max_chars")
PAST = 12 * SKEW  # seconds: a deadline this far behind has passed on any clock within the skew
FUTURE = 60 * SKEW
NEAR = 1.0  # seconds ahead: a deadline that passes while the server waits for a confirmation


def _audit_id() -> str:
    return f"conformance-audit-{secrets.token_hex(12)}"


def _rpc_error(reply: Reply) -> tuple[Any, Any] | None:
    return ((reply.error or {}).get("code"), (reply.error or {}).get("message")) if reply.kind == "error" else None


def _seen(reply: Reply) -> dict[str, Any]:
    envelope = reply.envelope if isinstance(reply.envelope, dict) else {}
    value = reply.value or {}
    return {"kind": reply.kind, "code": reply.code, "auditId": envelope.get("auditId"),
            "replayed": value.get("replayed"), "status": value.get("status")}


# -- auditId ---------------------------------------------------------------------------------------


@check("host.audit-echo", "EMC-HOST-014", "EMC-HP-052", uses=SEARCH)
@pytest.mark.parametrize("case", ["success", "failure", "two-calls", "auditId-in-arguments"])
def test_the_envelope_echoes_the_hosts_audit_id(world: World, case: str) -> None:
    """The envelope's auditId is exactly the one the host bound to that call: on success and on failure, each call
    its own, and never one written in the arguments (which stay INVALID_SCHEMA)."""
    scope = world.scope
    principal = world.principal(scope, {SEARCH})
    purpose = world.profile.purpose_ref
    arguments: dict[str, Any] = {"query": "ledger", "purpose_ref": purpose}
    if case == "failure":
        arguments = {"query": "", "purpose_ref": purpose}
    elif case == "auditId-in-arguments":
        arguments = {**arguments, "auditId": _audit_id()}
    world._require_offered(SEARCH, scope, principal)
    sent = [_audit_id() for _ in range(2 if case == "two-calls" else 1)]
    replies = [world.call(SEARCH, arguments, meta=world.host.meta(scope, principal, audit_id=a)) for a in sent]
    world.evidence.add("sent", sent)
    world.evidence.add("replies", [_seen(r) for r in replies])
    for reply in replies:
        require(reply.kind == "result" and isinstance(reply.envelope, dict), f"search answered {reply.kind}")
    for reply in replies:
        world.expect(reply, f"a search ({case})")
    expected_code = {"success": None, "two-calls": None}.get(case, "INVALID_SCHEMA")
    require([r.code for r in replies] == [expected_code] * len(replies), "the call did not end as the case needs")
    assert [r.envelope.get("auditId") for r in replies] == sent, "the envelope does not echo the host's auditId"


@check("host.audit-required", "EMC-HP-053", uses=SEARCH)
def test_a_call_without_an_audit_id_is_refused(world: World) -> None:
    """A binding without audit_id is refused on tools/call (-32603, nothing runs) and accepted on tools/list."""
    scope = world.scope
    principal = world.principal(scope, {SEARCH})
    world._require_offered(SEARCH, scope, principal)
    require("missing_audit_id" in world.host.forgeries, "the host adapter cannot leave out the audit id")
    meta = world.host.forged("missing_audit_id", scope, principal)
    listed = world.conn.list_tools(meta)
    called = world.conn.call(SEARCH, {"query": "ledger", "purpose_ref": world.profile.purpose_ref}, meta)
    world.evidence.add("list", {"kind": listed.kind, "error": listed.error})
    world.evidence.add("call", _seen(called))
    assert listed.kind == "result" and SEARCH in {t.get("name") for t in listed.result.get("tools", [])}, (
        "tools/list refused a binding without audit_id")
    refused_with(called, "trusted_context_unavailable", "a call under a binding without audit_id")


def _malformed_audit_id(kind: str) -> str:
    """An audit id the profile's format refuses (printable ASCII, no space, audit_id.min_chars..max_chars)."""
    body = _audit_id()
    if kind == "space":
        return body[:8] + " " + body[8:]
    if kind == "non-ascii":
        return body + "\u00e9"
    return (body * AUDIT_ID_MAX)[: AUDIT_ID_MAX + 1]  # too-long: one character over the limit


@check("host.audit-malformed", "EMC-HP-072", uses=CAPTURE)
@pytest.mark.parametrize("kind", ["space", "non-ascii", "too-long"])
def test_a_call_with_a_malformed_audit_id_is_refused(world: World, kind: str) -> None:
    """A binding whose audit_id breaks its format is refused on tools/call with -32603, and nothing runs: the same
    capture, sent again under a well-formed binding with the same key, is a first execution."""
    scope = world.scope
    principal = world.principal(scope, {CAPTURE})
    world._require_offered(CAPTURE, scope, principal)
    audit_id = _malformed_audit_id(kind)
    arguments = capture_arguments(world.profile.purpose_ref)
    meta = world.host.meta(scope, principal, audit_id=audit_id)
    require(world.host.audit_id_of(meta) == audit_id,
            "the host adapter does not sign the malformed audit_id it is given, so no call can carry one")
    called = world.call(CAPTURE, arguments, meta=meta)
    world.evidence.add("audit_id", {"chars": len(audit_id), "kind": kind})
    world.evidence.add("call", _seen(called))
    refused_with(called, "trusted_context_unavailable", f"a call whose audit_id is {kind}")
    retry = world.call(CAPTURE, arguments, scope=scope, principal=principal)
    world.evidence.add("retry", _seen(retry))
    world.expect(retry, "the same capture under a well-formed binding")
    require(retry.kind == "result" and retry.code is None, f"the well-formed capture answered {retry.said()}")
    assert _fresh_run(retry, CAPTURE), "the refused call stored the capture: its retry is a replay"


# -- deadline --------------------------------------------------------------------------------------


def _target(world: World, tool: str, scope: ScopeProfile) -> dict[str, Any]:
    """Arguments for one call of ``tool`` on a target made for it (mutations get a fresh key)."""
    purpose = world.profile.purpose_ref
    if tool == SEARCH:
        return {"query": "ledger", "purpose_ref": purpose}
    if tool == GET:
        return {"record_id": unknown_record(), "purpose_ref": purpose}
    if tool == CAPTURE:
        return capture_arguments(purpose)
    if tool == FORGET:
        record_id, _ = world.accepted_record(scope=scope)
        return {"record_id": record_id, "idempotency_key": fresh_key(), "reason_ref": "reason:conformance"}
    _, captured = world.capture(scope=scope, principal=world.principal(scope, {CAPTURE, tool}))
    extra = {"reason_ref": "reason:conformance"} if tool == WITHDRAW else {}
    return {"candidate_id": captured["candidate_id"], "idempotency_key": fresh_key(), **extra}


def _fresh_run(reply: Reply, tool: str) -> bool:
    """A first execution, not the replay of an earlier one."""
    value = reply.value or {}
    return value.get("status") == "committed_pending" if tool == CAPTURE else value.get("replayed") is False


@check("host.deadline-passed", "EMC-HOST-015", "EMC-HP-054",
       uses=CASE_TOOL, cases={ADMIT: (CAPTURE,), WITHDRAW: (CAPTURE,), FORGET: (CAPTURE, ADMIT)})
@pytest.mark.parametrize(
    "tool", [SEARCH, GET, CAPTURE, ADMIT, WITHDRAW, FORGET], ids=lambda t: t.removeprefix("engram_memory_")
)
def test_a_passed_deadline_changes_nothing(world: World, tool: str) -> None:
    """A call whose deadline has passed on arrival is DEADLINE_EXCEEDED and changes nothing: the same mutation,
    retried with the same key before a new deadline, is a first execution."""
    scope = world.scope
    principal = world.principal(scope, {tool})
    world._require_offered(tool, scope, principal)
    arguments = _target(world, tool, scope)
    late = world.call(tool, arguments, scope=scope, principal=principal, deadline=time.time() - PAST)
    world.evidence.add("past_deadline", _seen(late))
    world.expect(late, f"a {tool.removeprefix('engram_memory_')} whose deadline has passed")
    if CONTRACT.tools[tool].mutability == "read-only":
        return
    retry = world.call(tool, arguments, scope=scope, principal=principal, deadline=time.time() + FUTURE)
    world.evidence.add("retry", _seen(retry))
    world.expect(retry, "the same call, retried before a new deadline")


def _waits_for_the_host(profile: Profile) -> bool:
    return "server-initiated" in profile.confirmation_modes


def _require_a_wait(world: World) -> None:
    """Only the server-initiated mode makes a server wait for the host within a call; a target confirmed by
    host reference alone commits at once, so it holds no window for a late deadline or a cancellation."""
    if not _waits_for_the_host(world.profile):
        not_applicable("the profile declares only the host-reference confirmation mode: the server never waits for "
                       "the host within a call, and a call confirmed by reference is verified and committed at once, "
                       "so nothing holds it in flight for a late deadline or a cancellation to reach")


DEADLINE_DURING_CONFIRMATION = "host.deadline-during-confirmation"


@check(DEADLINE_DURING_CONFIRMATION, "EMC-HP-055", uses=(CAPTURE, WITHDRAW))
def test_a_deadline_that_passes_during_the_confirmation_stops_the_mutation(harness: Run, world: World) -> None:
    """A deadline that passes while the human decides stops the mutation: DEADLINE_EXCEEDED, nothing is committed,
    and a retry with the same key is a first execution. In the legacy era the server judges it again once the
    answer comes; in 2026-07-28 the answer comes on a retry whose own binding carries the passed deadline. Mostly
    a wait for the late answer: it runs on a session of its own beside the other waiting checks (_background)."""
    harness.background.take(DEADLINE_DURING_CONFIRMATION, world)


@in_background(DEADLINE_DURING_CONFIRMATION, applies=lambda era, profile, params: _waits_for_the_host(profile))
def deadline_during_confirmation(world: World) -> None:
    _require_a_wait(world)
    scope = world.scope
    principal = world.principal(scope, {CAPTURE, WITHDRAW})
    world._require_offered(WITHDRAW, scope, principal)
    # Answer after the deadline by as much of the skew as the confirmation's lifetime leaves room for.
    delay = min(scope.confirmation_ttl_seconds - 1.0, NEAR + SKEW + 1.0)
    if delay <= NEAR + 0.5:
        pytest.skip(f"{scope.label}'s confirmation_ttl_seconds ({scope.confirmation_ttl_seconds}) leaves no time to "
                    f"answer after a deadline {NEAR:g} s ahead: a TTL of {NEAR + 2.5:g} s or more unlocks this check")
    arguments = _target(world, WITHDRAW, scope)
    asked = world.conn.elicitations
    if world.era == "modern":
        late = _answered_after_the_deadline(world, scope, principal, arguments, delay)
    else:
        world.conn.answer_delay = delay
        try:
            late = world.call(WITHDRAW, arguments, scope=scope, principal=principal, deadline=time.time() + NEAR)
        finally:
            world.conn.answer_delay = 0.0
    world.evidence.add("answered_after_seconds", delay)
    world.evidence.add("server_clock_lag_tolerated_seconds", round(delay - NEAR, 3))
    world.evidence.add("near_deadline", _seen(late))
    assert late.kind == "result" and late.code == "DEADLINE_EXCEEDED", (
        f"a deadline that passed before the approval answered {late.said()}"
        + ("" if world.era == "modern" or world.conn.elicitations > asked else
           " (without asking for a confirmation)"))
    retry = world.call(WITHDRAW, arguments, scope=scope, principal=principal, deadline=time.time() + FUTURE)
    world.evidence.add("retry", _seen(retry))
    world.expect(retry, "the withdraw, retried before a new deadline")
    require(retry.value is not None, f"the retry before a new deadline did not succeed: {retry.said()}")
    assert _fresh_run(retry, WITHDRAW), "the withdraw committed after its deadline: its retry was a replay"


def _answered_after_the_deadline(world: World, scope: ScopeProfile, principal: str, arguments: dict[str, Any],
                                 delay: float) -> Reply:
    """2026-07-28: the call under a deadline NEAR s ahead asks for a confirmation; the approval goes out ``delay`` s
    later on the retry, whose own binding carries the same deadline, now passed."""
    deadline = time.time() + NEAR
    asked = world.conn.call(WITHDRAW, arguments, world.host.meta(scope, principal, deadline=deadline))
    world.evidence.add("asked", _seen(asked))
    require(asked.kind == "input_required", f"the withdraw did not ask for a confirmation: {asked.said()}")
    time.sleep(delay)
    return world.conn.call(WITHDRAW, arguments, world.host.meta(scope, principal, deadline=deadline),
                           input_responses=world.confirmer.input_responses("accept"),
                           request_state=(asked.result or {}).get("requestState"))


# Seconds ahead: room to commit on a server whose clock runs up to the skew ahead, with the skew again to spare for a
# slow answer; the check opens as the run begins, so its wait overlaps other checks.
COMMIT_AHEAD = 2 * SKEW + 2.0


DEADLINE_AFTER_COMMIT = "host.deadline-after-commit"


@head_start(DEADLINE_AFTER_COMMIT)
def capture_under_a_near_deadline(world: World) -> tuple[float, dict[str, Any], Reply, ScopeProfile, str]:
    """The capture whose deadline lies COMMIT_AHEAD ahead, sent as the run begins so that the wait for its deadline
    overlaps other checks: (its deadline, its arguments, its reply, the scope and the principal)."""
    scope = world.scope
    principal = world.principal(scope, {CAPTURE})
    world._require_offered(CAPTURE, scope, principal)
    arguments = capture_arguments(world.profile.purpose_ref)
    deadline = time.time() + COMMIT_AHEAD
    first = world.call(CAPTURE, arguments, scope=scope, principal=principal, deadline=deadline)
    return deadline, arguments, first, scope, principal


@check(DEADLINE_AFTER_COMMIT, "EMC-HP-055", uses=CAPTURE)
def test_a_commit_whose_deadline_then_passes_is_reported_and_replayed(harness: Run, world: World) -> None:
    """A capture that commits before its deadline reports its outcome; once that deadline has passed, a retry with
    the same key (its own binding, with a new deadline) is the replay of that capture: not DEADLINE_EXCEEDED and not
    a second capture."""
    deadline, arguments, first, scope, principal = harness.head_starts.take(DEADLINE_AFTER_COMMIT, world)
    world.evidence.add("before_the_deadline", _seen(first))
    # A server whose clock runs ahead may refuse the first call for its deadline, rightly: then there is no commit
    # to replay, and the check cannot conclude.
    require(first.value is not None and first.code is None,
            f"a capture under a deadline {COMMIT_AHEAD:g} s ahead was not taken ({first.said()})")
    assert first.value.get("status") == "committed_pending", (
        f"a capture under a deadline {COMMIT_AHEAD:g} s ahead answered {first.said()}")
    time.sleep(max(0.0, deadline + SKEW + 0.5 - time.time()))  # passed on any clock within the skew
    retry = world.call(CAPTURE, arguments, scope=scope, principal=principal, deadline=time.time() + FUTURE)
    world.evidence.add("retry_after_the_deadline", _seen(retry))
    # Before the model's judgement: DEADLINE_EXCEEDED is retriable, so the contract alone would only wait for more.
    assert retry.code != "DEADLINE_EXCEEDED", (
        "the retry after the first deadline was refused for that deadline: the committed outcome can no longer be "
        "learnt")
    world.expect(retry, "the capture, retried once its first deadline had passed")
    assert retry.value is not None, f"the retry after the deadline answered {retry.said()}"
    assert retry.value.get("status") == "duplicate_exact", (
        f"the retry after the deadline was not the replay of the committed capture: {retry.said()}")
    assert retry.value.get("candidate_id") == first.value.get("candidate_id"), (
        "the retry after the deadline named another candidate than the committed capture")


# -- cancellation ----------------------------------------------------------------------------------


REQUEST_CANCELLED = -32800  # JSON-RPC error a transport that must end a cancelled request may send (EMC-HP-056)
NO_CANCEL_WINDOW = (
    "in 2026-07-28 notifications/cancelled still cancels an in-flight call over stdio (over HTTP, closing the "
    "response stream does), but the server never waits for the host within a call: a confirmation is a new call, "
    "judged and committed at once. No moment exists at which the harness knows a gated call is past its "
    "confirmation and not yet committed; a cancellation sent at once races the call, and every outcome of that race "
    "is allowed (EMC-HP-056), so no check of it could fail on a real breach")


def _answer_words(answer: dict[str, Any] | None) -> str:
    """What the cancelled request got back, in words."""
    return "nothing" if answer is None else answer_words(answer.get("result"), answer.get("error"))


def _answer_seen(answer: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the cancelled request got back, as evidence: the error, or the envelope's outcome."""
    if answer is None:
        return None
    if "error" in answer:
        return {"error": answer["error"]}
    envelope = (answer.get("result") or {}).get("structuredContent")
    envelope = envelope if isinstance(envelope, dict) else {}
    return {"ok": envelope.get("ok"), "code": (envelope.get("error") or {}).get("code"),
            "value": (envelope.get("output") or {}).get("value")}


def _allowed_cancel_answer(answer: dict[str, Any] | None) -> bool:
    """EMC-HP-056: no answer, the JSON-RPC error -32800, or a CANCELLED envelope; never an outcome."""
    if answer is None:
        return True
    if "error" in answer:
        return (answer["error"] or {}).get("code") == REQUEST_CANCELLED
    envelope = (answer.get("result") or {}).get("structuredContent")
    return (isinstance(envelope, dict) and envelope.get("ok") is False
            and (envelope.get("error") or {}).get("code") == "CANCELLED")


CANCEL_BEFORE_COMMIT = "host.cancel-before-commit"


@check(CANCEL_BEFORE_COMMIT, "EMC-HOST-016", "EMC-HP-056", uses=(CAPTURE, CASE_TOOL), cases={FORGET: (ADMIT,)})
@pytest.mark.parametrize("tool", [WITHDRAW, FORGET], ids=lambda t: t.removeprefix("engram_memory_"))
def test_a_call_cancelled_before_it_commits_changes_nothing(harness: Run, world: World, tool: str) -> None:
    """notifications/cancelled while the server waits for the confirmation: the cancelled request gets no answer,
    -32800 or a CANCELLED envelope; the approval, answered after the cancellation, is no usable confirmation (it
    commits nothing); and a retry with the same key is a first execution. Mostly a wait for the late approval: it
    runs on a session of its own beside the other waiting checks (_background)."""
    harness.background.take(CANCEL_BEFORE_COMMIT, world, tool=tool)


@in_background(CANCEL_BEFORE_COMMIT,
               applies=lambda era, profile, params: era != "modern" and _waits_for_the_host(profile))
def cancel_before_commit(world: World, tool: str) -> None:
    if world.era == "modern":
        not_applicable(NO_CANCEL_WINDOW)
    _require_a_wait(world)
    scope = world.scope
    principal = world.principal(scope, {tool})
    world._require_offered(tool, scope, principal)
    arguments = _target(world, tool, scope)
    asked = world.conn.elicitations
    late_answer = 1.0
    world.conn.cancel_on_elicit, world.conn.answer_delay = True, late_answer
    try:
        cancelled = world.call(tool, arguments, scope=scope, principal=principal, answer="accept")
    finally:
        world.conn.cancel_on_elicit, world.conn.answer_delay = False, 0.0
    call_id = world.conn.tap.last_call_id
    world.evidence.add("cancelled", _seen(cancelled))
    require(world.conn.elicitations > asked, f"the server never asked for a confirmation ({cancelled.said()})")
    time.sleep(late_answer + 1.0)  # the late approval has reached the server before the retry goes out
    answer = world.conn.answer_to(call_id, within=0.5)
    world.evidence.add("cancelled_request_answer", _answer_seen(answer))
    pin("EMC-HP-056", _allowed_cancel_answer(answer),
        f"the cancelled request was answered {_answer_words(answer)}: this profile allows no answer, -32800 or a "
        "CANCELLED envelope")
    retry = world.call(tool, arguments, scope=scope, principal=principal, answer="accept")
    world.evidence.add("retry", _seen(retry))
    world.expect(retry, f"the {tool.removeprefix('engram_memory_')}, retried after its cancellation")
    require(retry.value is not None, f"the retry after the cancellation did not succeed: {retry.said()}")
    said_cancelled = (_answer_seen(answer) or {}).get("code") == "CANCELLED"
    # An envelope saying CANCELLED is a retriable refusal: nothing ran. Without one, the retry may replay a commit
    # the cancellation came too late for; this profile says the late approval ran nothing either.
    if said_cancelled:
        assert _fresh_run(retry, tool), (f"the cancelled {tool} was answered CANCELLED yet had committed: its retry "
                                         "was a replay")
    pin("EMC-HP-056", _fresh_run(retry, tool),
        f"the cancelled {tool} committed anyway (the approval answered after the cancellation ran it): its retry "
        "was a replay")


# -- trusted tenants and issuers, capture authority ------------------------------------------------


def _refused_everywhere(world: World, forgery: Forgery) -> None:
    """tools/list and tools/call under the forged binding are both the constant -32603."""
    scope = world.scope
    principal = world.principal(scope, {SEARCH})
    world._require_offered(SEARCH, scope, principal)
    require(forgery in world.host.forgeries, f"the host adapter cannot forge a {forgery} binding")
    listed = world.conn.list_tools(world.host.forged(forgery, scope, principal))
    called = world.conn.call(SEARCH, {"query": "ledger", "purpose_ref": world.profile.purpose_ref},
                             world.host.forged(forgery, scope, principal))
    world.evidence.add("list", {"kind": listed.kind, "error": listed.error,
                                "tools": len((listed.result or {}).get("tools", []))})
    world.evidence.add("call", _seen(called))
    refused_with(listed, "trusted_context_unavailable", f"tools/list under {FORGERY_WORDS[forgery]}")
    refused_with(called, "trusted_context_unavailable", f"tools/call under {FORGERY_WORDS[forgery]}")


@check("host.foreign-tenant", "EMC-HOST-011", "EMC-HP-008", uses=SEARCH)
def test_a_tenant_the_key_is_not_trusted_for_is_refused(world: World) -> None:
    """A binding, signed by the trusted key, for a tenant the key is not trusted for: -32603 on list and call."""
    _refused_everywhere(world, "foreign_tenant")


@check("host.foreign-issuer", "EMC-HOST-011", "EMC-HP-008", uses=SEARCH)
def test_an_issuer_the_key_is_not_trusted_for_is_refused(world: World) -> None:
    """A binding, signed by the trusted key, in the name of an issuer the key is not trusted for: -32603."""
    _refused_everywhere(world, "foreign_issuer")


@check("host.capture-unauthorized", "EMC-CAP-018", "EMC-HP-057", uses=CAPTURE, roles="capture-denied")
def test_a_capture_without_capture_authority_is_unauthorized(world: World) -> None:
    """A principal granted capture but without capture authority in the scope gets UNAUTHORIZED; a tool it was never
    granted stays -32602."""
    found = world.profile.capture_denied()
    if found is None:
        pytest.skip(world.profile.lacks("capture-denied"))
    scope, principal = found
    world._require_offered(CAPTURE, scope, principal)
    arguments = capture_arguments(world.profile.purpose_ref)
    reply = world.call(CAPTURE, arguments, scope=scope, principal=principal)
    world.evidence.add("capture", _seen(reply))
    world.expect(reply, "a capture by a principal without capture authority")
    fixed = world.call(CAPTURE, arguments, scope=scope, principal=world.principal(scope, {CAPTURE}))
    world.evidence.add("same_capture_by_an_authorised_principal", _seen(fixed))
    world.expect(fixed, "the same capture by a principal with capture authority")
    ungranted = sorted(set(CONTRACT.tools) - scope.principals[principal])
    if ungranted:
        other = world.conn.call(ungranted[0], {}, world.host.meta(scope, principal))
        world.evidence.add("ungranted", {"tool": ungranted[0], **_seen(other)})
        pin("EMC-HP-057", _rpc_error(other) == (UNKNOWN_TOOL.jsonrpc_code, UNKNOWN_TOOL.message),
            "a tool never granted was not the unknown-tool error")
